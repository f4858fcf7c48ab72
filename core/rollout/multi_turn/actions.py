"""Tool calls in an assistant turn's text, in the two formats a policy can write them.

- `chat`: the model's own chat-template calls, hermes style (Qwen2.5/Qwen3): `<tool_call>{"name": ..., "arguments":
  {...}}</tool_call>`, one block per call.
- `tags`: `<tool>argument</tool>` for a tool of one argument, e.g. `<calc>4821*37</calc>`: for models too small to
  write JSON; a stop string `</tool>` ends the turn right after the call.

A call the text opens but never closes, or whose JSON does not parse, comes back as a call with an `error`: the
error becomes the observation, and the episode goes on.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

FORMATS = ("chat", "tags")
HERMES_BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict | str
    error: str | None = None  # a malformed call: this text is its observation


def parse_calls(text: str, action_format: str, tool_names: list[str]) -> list[ToolCall]:
    return parse_hermes_calls(text) if action_format == "chat" else parse_tag_calls(text, tool_names)


def parse_tag_calls(text: str, tool_names: list[str]) -> list[ToolCall]:
    found = []
    for name in tool_names:
        opened, closed = f"<{name}>", f"</{name}>"
        for match in re.finditer(re.escape(opened) + "(.*?)" + re.escape(closed), text, re.DOTALL):
            found.append((match.start(), ToolCall(name, match.group(1).strip())))
        last_open, last_close = text.rfind(opened), text.rfind(closed)
        if last_open > last_close:
            found.append((last_open, ToolCall(name, "", error=f"error: malformed tool call: {opened} is never "
                                                                 f"closed with {closed}")))
    return [call for _, call in sorted(found, key=lambda item: item[0])]


def parse_hermes_calls(text: str) -> list[ToolCall]:
    calls = [_hermes_call(block) for block in HERMES_BLOCK.findall(text)]
    if text.rfind("<tool_call>") > text.rfind("</tool_call>"):
        calls.append(ToolCall("", "", error="error: malformed tool call: <tool_call> is never closed"))
    return calls


def _hermes_call(block: str) -> ToolCall:
    try:
        call = json.loads(block)
    except json.JSONDecodeError as error:
        return ToolCall("", "", error=f"error: the tool call is not valid JSON ({error})")
    arguments = call.get("arguments", {}) if isinstance(call, dict) else None
    if isinstance(arguments, str):  # some models write the arguments as a JSON string
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            arguments = None
    if not isinstance(call, dict) or not isinstance(call.get("name"), str) or not isinstance(arguments, dict):
        return ToolCall("", "", error='error: a tool call is {"name": <tool>, "arguments": {...}}')
    return ToolCall(call["name"], arguments)
