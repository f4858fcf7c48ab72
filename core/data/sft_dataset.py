"""Supervised fine-tuning data: conversations laid out token for token as the RL rollout lays them out.

Three row layouts load, from parquet or JSONL files (the same reader as the RL prompts):
  - verl's SFT parquet: a prompt and a response field, `data.prompt_key` and `data.response_key` (dotted paths,
    e.g. `data.prompt_key=extra_info.question data.response_key=extra_info.answer`); a plain-string prompt
    becomes one user message, and the response one assistant message after it.
  - chat `messages` lists (`data.messages_key`, used when `data.response_key` is null): system, user, assistant
    and tool messages, several turns, assistant `tool_calls` included; a row's `tools` field (JSON schemas) goes
    to the chat template, as in a multi-turn rollout.
  - either one as JSONL, one row a line.

The loss is on the assistant's tokens only. The conversation is rendered once with the tokenizer's chat template;
each assistant turn is the text from the end of its generation prompt through the tokenizer's EOS (the
end-of-turn token an engine stops on), and the text around the turns (system prompt, user and tool messages,
turn headers, the newline after an end-of-turn) is context, not trained. Each piece is tokenized on its own, as
the multi-turn rollout keeps sampled turns and the template's glue apart (core/data/turn_template.py), so an SFT
example and an RL trajectory of the same conversation are the same ids.

In the trainer's batch the prompt is everything before the first assistant turn (left-padded, at most
`data.max_prompt_length` tokens) and the response everything from it on (right-padded, at most
`data.max_response_length`), with `response_mask` 1 on the trained tokens: the RL batch's layout.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from core.batch import Batch
from core.data.dataset import TRUNCATION_MODES, as_messages, left_padded, padding_id
from core.data.rows import DataError, column_values, get_field, read_rows

logger = logging.getLogger(__name__)
TOOLS_FIELD = "tools"  # a row's tool schemas, for the chat template (a list, or that list as a JSON string)


@dataclass
class SFTItem:
    prompt_ids: list[int]  # the conversation up to the first assistant turn's generation prompt, included
    response_ids: list[int]  # the rest: assistant turns, and the tool or user messages between them
    loss_mask: list[int]  # per response token: 1 on the assistant's tokens
    index: int = 0  # row position across the input files, before any filtering


@dataclass(frozen=True)
class SFTKeys:
    """Which fields of a row hold the conversation: `response_key` set: prompt + response; else `messages_key`."""

    prompt_key: str = "prompt"
    response_key: str | None = None
    messages_key: str = "messages"
    config_prefix: str = "data"


# ---- rows -> conversations ---------------------------------------------------------------------
def conversations(rows: list[dict], path: Path, keys: SFTKeys) -> list[list[dict]]:
    """Each row's messages; a DataError naming the file, the row and the field for a row that is not one."""
    prefix = keys.config_prefix
    if not rows:
        raise DataError(f"{path}: the file has no rows — an SFT dataset needs at least one conversation")
    if keys.response_key is None:
        values = column_values(rows, path, keys.messages_key, f"{prefix}.messages_key")
        return [checked_messages(value, path, i, keys.messages_key) for i, value in enumerate(values)]
    prompts = column_values(rows, path, keys.prompt_key, f"{prefix}.prompt_key")
    responses = column_values(rows, path, keys.response_key, f"{prefix}.response_key")
    out = []
    for i, (prompt, response) in enumerate(zip(prompts, responses)):
        if not isinstance(response, str):
            raise DataError(f"{path} row {i}: field {keys.response_key!r} ({prefix}.response_key) is "
                            f"{type(response).__name__} {_short(response)} — expected a string, the assistant's reply")
        out.append([*as_messages(prompt, path, i, keys.prompt_key), {"role": "assistant", "content": response}])
    return out


def checked_messages(value, path: Path, row: int, key: str) -> list[dict]:
    """A list of {role, content} messages with at least one assistant turn after a first non-assistant one."""
    if not isinstance(value, (list, tuple, np.ndarray)) or not all(isinstance(m, dict) for m in value):
        raise DataError(f"{path} row {row}: field {key!r} is {type(value).__name__} — expected a list of "
                        "{role, content} messages")
    messages = [{k: v for k, v in m.items() if v is not None or k == "content"} for m in value]
    for turn, message in enumerate(messages):
        role, content = message.get("role"), message.get("content")
        if not isinstance(role, str):
            raise DataError(f"{path} row {row}: message {turn} of {key!r} has no role — expected "
                            "system, user, assistant or tool")
        if content is None and not (role == "assistant" and message.get("tool_calls")):
            raise DataError(f"{path} row {row}: message {turn} ({role}) of {key!r} has no content — expected a "
                            "string (only an assistant message with tool_calls may leave it out)")
        if content is not None and not isinstance(content, str):
            raise DataError(f"{path} row {row}: message {turn} ({role}) of {key!r} has content of type "
                            f"{type(content).__name__} — expected a string")
        message["content"] = content or ""
        if isinstance(message.get("tool_calls"), np.ndarray):
            message["tool_calls"] = list(message["tool_calls"])
    roles = [m["role"] for m in messages]
    if "assistant" not in roles:
        raise DataError(f"{path} row {row}: {key!r} has no assistant message (roles {roles}) — nothing to train on")
    if roles[0] == "assistant":
        raise DataError(f"{path} row {row}: {key!r} opens with an assistant message — expected a prompt (system or "
                        "user) before the first assistant turn")
    return messages


def row_tools(row: dict, path: Path, index: int) -> dict:
    """The chat template's `tools` argument from the row's `tools` field, if it has one."""
    tools = get_field(row, TOOLS_FIELD, None)
    if tools is None:
        return {}
    if isinstance(tools, str):
        try:
            tools = json.loads(tools)
        except json.JSONDecodeError as error:
            raise DataError(f"{path} row {index}: field {TOOLS_FIELD!r} is not valid JSON ({error.msg})") from None
    if not isinstance(tools, (list, np.ndarray)):
        raise DataError(f"{path} row {index}: field {TOOLS_FIELD!r} is {type(tools).__name__} — expected a list of "
                        "tool schemas")
    return {"tools": list(tools)}


# ---- conversations -> token pieces --------------------------------------------------------------
def conversation_pieces(tokenizer, messages: list[dict], template_kwargs: dict) -> list[tuple[str, bool]]:
    """The rendered conversation cut into (text, trained) pieces: each assistant turn from the end of its
    generation prompt through the EOS after it is trained; the text between turns is not. Ends with the last
    assistant turn's EOS (what follows it, the template's newline or later messages, trains nothing)."""
    def render(part, generation_prompt):
        return tokenizer.apply_chat_template(part, add_generation_prompt=generation_prompt, tokenize=False,
                                             **template_kwargs)

    full, eos = render(messages, False), tokenizer.eos_token
    pieces, cursor = [], 0
    for turn, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        before = render(messages[:turn], True)
        if not full.startswith(before) or len(before) < cursor:
            raise TemplateLayoutError(f"the chat template renders the conversation before message {turn} differently "
                                      "once later messages follow, so the assistant turn's start cannot be found")
        end = full.find(eos, len(before)) if eos else -1
        if end < 0:
            raise TemplateLayoutError(f"assistant message {turn} does not end with the tokenizer's EOS {eos!r} in the "
                                      "chat template's render, so its end cannot be found")
        end += len(eos)
        pieces += [(full[cursor:len(before)], False), (full[len(before):end], True)]
        cursor = end
    return [(text, trained) for text, trained in pieces if text]


class TemplateLayoutError(ValueError):
    """A chat template whose render does not show where the assistant turns begin and end."""


def layout_ids(tokenizer, pieces: list[tuple[str, bool]]) -> tuple[list[int], list[int], int]:
    """(ids, loss mask, number of prompt ids): each piece tokenized on its own; the prompt is the first piece."""
    encoded = tokenizer([text for text, _ in pieces], add_special_tokens=False)["input_ids"]
    ids, mask = [], []
    for piece_ids, (_, trained) in zip(encoded, pieces, strict=True):
        ids += piece_ids
        mask += [int(trained)] * len(piece_ids)
    return ids, mask, len(encoded[0]) if not pieces[0][1] else 0


# ---- the dataset --------------------------------------------------------------------------------
class SFTDataset:
    """Tokenized SFT conversations (`SFTItem`s), checked and fitted to the length limits up front.

    truncation (data.truncation): a prompt over `max_prompt_length` as the RL prompts (error | filter | left: keep
    its end | right: keep its start); a response over `max_response_length`: error refuses naming the row,
    filter drops the row (counted in a warning), left and right keep the response's first tokens (cut at its end:
    a response must still follow its prompt).
    """

    def __init__(self, path: str | os.PathLike | Sequence[str | os.PathLike], tokenizer, *, max_prompt_length: int,
                 max_response_length: int, truncation: str = "error", keys: SFTKeys = SFTKeys(),
                 template_kwargs: dict | None = None):
        prefix = keys.config_prefix
        if truncation not in TRUNCATION_MODES:
            raise ValueError(f"{prefix}.truncation={truncation!r}; use one of {list(TRUNCATION_MODES)}")
        if getattr(tokenizer, "chat_template", None) is None:
            raise DataError("the tokenizer of model.path has no chat_template — SFT conversations are chat messages "
                            "and need one: use a chat (instruct) model or set tokenizer.chat_template")
        self.tokenizer, self.keys, self.truncation = tokenizer, keys, truncation
        self.max_prompt_length, self.max_response_length = max_prompt_length, max_response_length
        self.template_kwargs = dict(template_kwargs or {})
        paths = [path] if isinstance(path, (str, os.PathLike)) else list(path)
        self.items: list[SFTItem] = []
        self.num_rows = 0
        self.dropped: list[tuple[str, int, str]] = []  # (file, row, why) of each row data.truncation=filter dropped
        for file_path in paths:
            self.items += self._load_file(Path(file_path))
        if not self.items:
            raise DataError(f"{', '.join(str(p) for p in paths)}: no conversation is left — all {self.num_rows} are "
                            f"over the length limits and {prefix}.truncation=filter dropped them (first: "
                            f"{self.dropped[0][2]}); raise {prefix}.max_prompt_length / {prefix}.max_response_length")

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> SFTItem:
        return self.items[i]

    @property
    def pad_token_id(self) -> int:
        return padding_id(self.tokenizer)

    @property
    def loss_tokens(self) -> int:
        return sum(sum(item.loss_mask) for item in self.items)

    def _load_file(self, path: Path) -> list[SFTItem]:
        rows = read_rows(path)
        first_index, self.num_rows = self.num_rows, self.num_rows + len(rows)
        items, dropped_before = [], len(self.dropped)
        for i, messages in enumerate(conversations(rows, path, self.keys)):
            kwargs = {**self.template_kwargs, **row_tools(rows[i], path, i)}
            try:
                pieces = conversation_pieces(self.tokenizer, messages, kwargs)
            except TemplateLayoutError as error:
                raise DataError(f"{path} row {i}: {error} — use a template that keeps earlier turns as they are "
                                "(or give the row as data.prompt_key + data.response_key)") from None
            ids, mask, prompt_length = layout_ids(self.tokenizer, pieces)
            item = self._fit(SFTItem(ids[:prompt_length], ids[prompt_length:], mask[prompt_length:],
                                     first_index + i), path, i)
            if item is not None:
                items.append(item)
        if len(self.dropped) > dropped_before:
            logger.warning("%s: data.truncation=filter dropped %d of %d rows over the length limits (first: %s)",
                           path, len(self.dropped) - dropped_before, len(rows), self.dropped[dropped_before][2])
        return items

    def _fit(self, item: SFTItem, path: Path, row: int) -> SFTItem | None:
        """`item` within the length limits (cut per data.truncation), None when filtered out."""
        prefix = self.keys.config_prefix
        over = []
        if len(item.prompt_ids) > self.max_prompt_length:
            over.append(("prompt", len(item.prompt_ids), "max_prompt_length", self.max_prompt_length))
        if len(item.response_ids) > self.max_response_length:
            over.append(("response", len(item.response_ids), "max_response_length", self.max_response_length))
        if not over:
            return item
        part, length, key, limit = over[0]
        why = f"{path} row {row}: its {part} is {length} tokens, over {prefix}.{key}={limit}"
        if self.truncation == "error":
            raise DataError(f"{why} — raise {prefix}.{key}, or set {prefix}.truncation=filter (drop such rows) or "
                            f"right (cut them)")
        if self.truncation == "filter":
            self.dropped.append((str(path), row, why))
            return None
        prompt = item.prompt_ids
        if len(prompt) > self.max_prompt_length:
            prompt = prompt[-self.max_prompt_length:] if self.truncation == "left" else prompt[:self.max_prompt_length]
        keep = self.max_response_length
        return SFTItem(prompt, item.response_ids[:keep], item.loss_mask[:keep], item.index)


def collate_sft(items: Sequence[SFTItem], pad_token_id: int) -> Batch:
    """The RL batch's layout: left-padded prompts, right-padded responses, `response_mask` on the trained tokens."""
    if not items:
        raise ValueError("collate_sft: no items to collate")
    prompts, prompt_mask = left_padded([item.prompt_ids for item in items], pad_token_id)
    width = max(len(item.response_ids) for item in items)
    responses = torch.full((len(items), width), pad_token_id, dtype=torch.long)
    response_attention = torch.zeros((len(items), width), dtype=torch.long)
    response_mask = torch.zeros((len(items), width), dtype=torch.long)
    for row, item in enumerate(items):
        length = len(item.response_ids)
        responses[row, :length] = torch.tensor(item.response_ids, dtype=torch.long)
        response_attention[row, :length] = 1
        response_mask[row, :length] = torch.tensor(item.loss_mask, dtype=torch.long)
    attention_mask = torch.cat([prompt_mask, response_attention], dim=1)
    tensors = {"prompts": prompts, "responses": responses, "response_mask": response_mask,
               "input_ids": torch.cat([prompts, responses], dim=1), "attention_mask": attention_mask,
               "position_ids": (attention_mask.cumsum(dim=1) - 1).clamp(min=0)}
    return Batch(tensors, {"index": np.array([item.index for item in items], dtype=object)}).check("sft_data")


def _short(value, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
