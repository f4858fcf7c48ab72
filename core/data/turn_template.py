"""Token-exact multi-turn trajectories: what goes between two assistant turns, from the model's chat template.

A trajectory is never re-tokenized. The prompt is rendered once; each assistant turn is the engine's sampled ids,
verbatim; what follows a turn (its end-of-turn tokens, the tool messages, the next generation prompt) is taken from
the template as the text it renders after an assistant message in a fixed dummy conversation, and tokenized on its
own. Re-tokenizing the whole conversation instead would let the tokenizer merge across turn boundaries into ids the
policy never sampled (TRL #5224, SkyRL #123, slime #117).

This is exact only for templates that render an earlier turn the same way whatever follows it. Some do not: Qwen3's
renders the last assistant message with an empty `<think>` block that earlier ones lose, and drops past reasoning
after a new user query. `check_template_keeps_turns` tries a three-turn conversation before any engine starts and
refuses such a template with one line.

It sits with the data, below the models and the rollout, because both lay episodes out with it: the multi-turn
rollout (core/rollout/multi_turn/) and the tool warm start's SFT (core/models/tool_warmstart.py).
"""

from __future__ import annotations

from collections.abc import Sequence

MARKER = "RECIPEZOO-ASSISTANT-TURN"  # stands for an assistant turn's content; plain text every template passes through


class TemplateError(ValueError):
    """A chat template that cannot give token-exact multi-turn trajectories."""


class TurnTemplate:
    """Renders the text between assistant turns with `tokenizer`'s chat template (`template_kwargs` go to every
    `apply_chat_template` call, e.g. the tool schemas)."""

    def __init__(self, tokenizer, template_kwargs: dict | None = None, stop_ids: Sequence[int] = ()):
        self.tokenizer = tokenizer
        self.template_kwargs = dict(template_kwargs or {})
        self.stop_ids = set(stop_ids) | {tokenizer.eos_token_id}

    def render(self, messages: list[dict], add_generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(messages, add_generation_prompt=add_generation_prompt,
                                                  tokenize=False, **self.template_kwargs)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def prompt_ids(self, messages: list[dict]) -> list[int]:
        return self.encode(self.render(messages, add_generation_prompt=True))

    def after_turn_text(self, tool_messages: list[dict]) -> str:
        """The text after an assistant turn's content: its end-of-turn, the tool messages, the next generation prompt."""
        dummy = [{"role": "user", "content": "?"}, {"role": "assistant", "content": MARKER}, *tool_messages]
        text = self.render(dummy, add_generation_prompt=True)
        return text[text.rindex(MARKER) + len(MARKER):]

    def after_turn_ids(self, sampled_ids: list[int], tool_messages: list[dict]) -> list[int]:
        """`after_turn_text` as ids, less the end-of-turn token the engine already sampled (a turn stopped by a
        stop string has none, so all of the template's end-of-turn comes from here: never missing, never twice)."""
        ids = self.encode(self.after_turn_text(tool_messages))
        if sampled_ids and sampled_ids[-1] in self.stop_ids and ids and ids[0] == sampled_ids[-1]:
            return ids[1:]
        return ids

    def full_render_ids(self, messages: list[dict]) -> list[int]:
        """The whole conversation rendered at once, as `check_template` compares it with a trajectory."""
        last_is_assistant = messages[-1]["role"] == "assistant"
        return self.encode(self.render(messages, add_generation_prompt=not last_is_assistant))


def matches_full_render(template: TurnTemplate, messages: list[dict], trajectory_ids: list[int],
                        cut: bool = False) -> bool:
    """True when the trajectory's ids begin the full render's, followed by no more than the end of the last turn
    (Qwen's <|im_end|>\n, which the engine never samples after a stop string or a cut). `cut`: the response
    budget ended the episode, perhaps inside a tool reply, so only the prefix is compared."""
    full = template.full_render_ids(messages)
    if full[: len(trajectory_ids)] != trajectory_ids:
        return False
    rest = template.tokenizer.decode(full[len(trajectory_ids):])
    return cut or template.after_turn_text([]).startswith(rest) or not rest.strip()


def check_template_keeps_turns(template: TurnTemplate, tool_role: str = "tool") -> None:
    """Raise `TemplateError` (one line) unless a three-turn tool conversation built turn by turn, as the rollout
    builds it, renders the same as the whole conversation at once, for plain turns or turns that open with a
    `<think>` block (the form a thinking model samples)."""
    for style in ("plain", "think"):
        contents = [f"<think>\nr{i}\n</think>\n\nturn {i}" if style == "think" else f"turn {i}" for i in range(3)]
        built, messages = _build_turn_by_turn(template, contents, tool_role)
        full = template.render(messages, add_generation_prompt=False)
        # What the whole render adds after the last turn may only be that turn's end (its <|im_end|>\n).
        if full.startswith(built) and template.after_turn_text([]).startswith(full[len(built):]):
            return
    name = getattr(template.tokenizer, "name_or_path", "") or "the model"
    raise TemplateError(
        f"rollout.multi_turn: the chat template of {name} renders earlier turns differently once later turns "
        "follow (e.g. Qwen3's drops reasoning or empty <think> blocks), so trajectories could not be token-exact; "
        "use a template that keeps past turns verbatim (Qwen3: leave enable_thinking on, its default)")


def _build_turn_by_turn(template: TurnTemplate, contents: list[str], tool_role: str) -> tuple[str, list[dict]]:
    messages = [{"role": "user", "content": "?"}]
    text = template.render(messages, add_generation_prompt=True)
    for i, content in enumerate(contents):
        messages.append({"role": "assistant", "content": content})
        text += content
        if i < len(contents) - 1:
            tool = [{"role": tool_role, "content": f"result {i}"}]
            text += template.after_turn_text(tool)
            messages += tool
    return text, messages
