"""Preference data for a reward model: rows of (prompt, chosen, rejected), as TRL's and OpenRLHF's sets have them.

Two shapes of row are read:
- strings: `prompt` the user's message, `chosen` and `rejected` the two answers;
- chat messages: `prompt` a list of messages (or absent), `chosen` and `rejected` lists of messages whose last one
  is the assistant's answer (a whole conversation each when `prompt` is absent, as in Anthropic's HH set).
Each side is tokenized as a rollout is: the prompt through the chat template with the generation prompt, then
the answer's tokens and the EOS the policy would end on, so the reward model is trained on the very token
(the last one) it is read at when it scores rollouts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from core.batch import Batch
from core.data.dataset import left_padded
from core.data.rows import DataError, read_rows

PAIR_FIELDS = ("chosen", "rejected")
PAIR_KEY = "is_chosen"  # a pair batch's (2P,) marker: rows chosen, rejected alternate, and the engine keeps each
                        # pair in one micro-batch


@dataclass(frozen=True)
class PreferencePair:
    prompt_key: str  # the prompt's text, to split train and held-out by prompt
    chosen_ids: list[int]
    rejected_ids: list[int]


def conversation(prompt, answer, where: str) -> tuple[list[dict], str]:
    """(the prompt's messages, the answer's text) of one side of a row."""
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt or [])
    if isinstance(answer, str):
        return messages, answer
    answer = list(answer or [])
    if not answer or not isinstance(answer[-1], dict) or answer[-1].get("role") != "assistant":
        raise DataError(f"{where}: expected a string or chat messages ending with an assistant message")
    return messages + [dict(m) for m in answer[:-1]], str(answer[-1].get("content", ""))


def tokenize_side(tokenizer, messages: list[dict], answer: str) -> list[int]:
    prompt_ids = list(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                    return_dict=False))
    return prompt_ids + tokenizer.encode(answer, add_special_tokens=False) + [tokenizer.eos_token_id]


def load_pairs(paths: list[str], tokenizer, max_length: int) -> tuple[list[PreferencePair], list[str]]:
    """Every row of `paths` as a tokenized pair, and one line per kind of row left out (longer than
    `max_length` tokens, identical sides), with its count: nothing is dropped unsaid."""
    pairs, too_long, identical = [], 0, 0
    for path in paths:
        rows = read_rows(path)
        if not rows:
            raise DataError(f"{path}: no rows; a preference file has prompt, chosen and rejected per row")
        for number, row in enumerate(rows):
            where = f"{path}: row {number}"
            missing = [name for name in PAIR_FIELDS if row.get(name) is None]
            if missing:
                raise DataError(f"{where} has no {missing} (it has {sorted(row)}); a preference row has prompt, "
                                "chosen and rejected (strings or chat messages)")
            sides = [conversation(row.get("prompt"), row[name], f"{where} field {name!r}") for name in PAIR_FIELDS]
            if not sides[0][0]:
                raise DataError(f"{where}: no prompt (a `prompt` field, or messages before the answers)")
            ids = [tokenize_side(tokenizer, messages, answer) for messages, answer in sides]
            if max(len(side) for side in ids) > max_length:
                too_long += 1
            elif ids[0] == ids[1]:
                identical += 1
            else:
                pairs.append(PreferencePair(repr(sides[0][0]), *ids))
    left_out = [f"{count} pairs {why}" for count, why in ((too_long, f"longer than {max_length} tokens (raise "
                "--max-length)"), (identical, "whose chosen and rejected are the same")) if count]
    return pairs, left_out


def split_held_out(pairs: list[PreferencePair], fraction: float, seed: int):
    """(train, held-out): a `fraction` of the prompts, drawn by `seed`, with all their pairs, so no held-out
    prompt is trained on."""
    prompts = sorted({pair.prompt_key for pair in pairs})
    held = set(np.random.default_rng(seed).permutation(prompts)[: int(round(fraction * len(prompts)))].tolist())
    return [p for p in pairs if p.prompt_key not in held], [p for p in pairs if p.prompt_key in held]


def pair_batch(pairs: list[PreferencePair], pad_token_id: int) -> Batch:
    """(2P, L) rows chosen, rejected, chosen, ... left-padded, with `is_chosen`: a pair's rows stay adjacent."""
    sequences = [ids for pair in pairs for ids in (pair.chosen_ids, pair.rejected_ids)]
    input_ids, attention_mask = left_padded(sequences, pad_token_id)
    position_ids = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)
    is_chosen = torch.tensor([1, 0] * len(pairs), dtype=torch.long)
    return Batch({"input_ids": input_ids, "attention_mask": attention_mask, "position_ids": position_ids,
                  PAIR_KEY: is_chosen})
