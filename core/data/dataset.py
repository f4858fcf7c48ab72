"""Prompt datasets in verl's parquet schema, from parquet or JSONL files.

A row is `{data_source, prompt: [{role, content}], ability, reward_model: {style: "rule",
ground_truth}, extra_info: {...}}`. Other layouts load through key remapping: `prompt_key` and
`ground_truth_key` are dotted paths into the row (`data.prompt_key=question`,
`data.ground_truth_key=answer`); a plain-string prompt becomes one user message.

Prompts are tokenized once, up front, through the tokenizer's chat template, so overlong prompts
are found (and filtered or reported) before the first step, not in the middle of a run.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from core.batch import Batch
from core.data.rows import REGENERATE_HINT, DataError, column_values, read_rows

logger = logging.getLogger(__name__)

TRUNCATION_MODES = ("error", "filter", "left", "right")


@dataclass
class PromptItem:
    prompt_ids: list[int]  # chat-templated prompt, generation prompt included
    data_source: str  # picks the reward scorer
    ground_truth: Any
    raw_prompt: list[dict]  # the messages, for rollout backends that template themselves
    extra_info: dict = field(default_factory=dict)
    index: int = 0  # row position across the input files, before any filtering: stable across runs


# ---- the dataset --------------------------------------------------------------------------------
class PromptDataset:
    """Chat-templated, tokenized prompts with their data source and ground truth.

    truncation: "error" raises if any prompt is longer than `max_prompt_length`; "filter" drops
    those prompts; "left"/"right" cut token ids from that side ("left" keeps the end of the
    prompt, where the chat template puts the generation prompt).
    `config_prefix` only names config keys in error messages (e.g. "data" -> data.prompt_key).
    `template_kwargs` go to the chat template (a multi-turn run's `tools`).
    """

    def __init__(
        self,
        path: str | os.PathLike | Sequence[str | os.PathLike],
        tokenizer,
        *,
        max_prompt_length: int,
        truncation: str = "error",
        prompt_key: str = "prompt",
        ground_truth_key: str = "reward_model.ground_truth",
        config_prefix: str = "data",
        template_kwargs: dict | None = None,
    ):
        if truncation not in TRUNCATION_MODES:
            raise ValueError(f"{config_prefix}.truncation={truncation!r}; use one of {list(TRUNCATION_MODES)}")
        self.tokenizer = tokenizer
        self.max_prompt_length = max_prompt_length
        self.truncation = truncation
        self.prompt_key = prompt_key
        self.ground_truth_key = ground_truth_key
        self.config_prefix = config_prefix
        self.template_kwargs = dict(template_kwargs or {})
        paths = [path] if isinstance(path, (str, os.PathLike)) else list(path)
        self.items: list[PromptItem] = []
        self.num_filtered = 0
        for file_path in paths:
            self.items += self._load_file(Path(file_path), first_index=len(self.items) + self.num_filtered)
        if not self.items:
            raise DataError(
                f"{', '.join(str(p) for p in paths)}: every prompt is longer than "
                f"{config_prefix}.max_prompt_length={max_prompt_length}, so none is left — raise it"
            )

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> PromptItem:
        return self.items[i]

    @property
    def pad_token_id(self) -> int:
        return padding_id(self.tokenizer)

    def _load_file(self, path: Path, first_index: int) -> list[PromptItem]:
        rows = read_rows(path)
        if not rows:
            raise DataError(f"{path}: the file has no rows — {REGENERATE_HINT}")
        prompts = self._column(rows, path, self.prompt_key, "prompt_key")
        messages = [as_messages(prompt, path, i, self.prompt_key) for i, prompt in enumerate(prompts)]
        ground_truths = self._column(rows, path, self.ground_truth_key, "ground_truth_key")
        data_sources = self._column(rows, path, "data_source", None)
        prompt_ids = self._tokenize(messages)
        keep = self._fit_length(prompt_ids, path)
        return [
            PromptItem(
                prompt_ids=prompt_ids[i],
                data_source=data_sources[i],
                ground_truth=ground_truths[i],
                raw_prompt=messages[i],
                extra_info=dict(rows[i].get("extra_info") or {}),
                index=first_index + i,
            )
            for i in keep
        ]

    def _column(self, rows: list[dict], path: Path, key: str, config_field: str | None) -> list:
        return column_values(rows, path, key, f"{self.config_prefix}.{config_field}" if config_field else None)

    def _tokenize(self, messages: list[list[dict]]) -> list[list[int]]:
        if getattr(self.tokenizer, "chat_template", None) is None:
            raise DataError("the tokenizer of model.path has no chat_template — prompts are chat messages and need "
                            "one: use a chat (instruct) model or set tokenizer.chat_template")
        # Template to text, then tokenize ourselves: the text already holds the special tokens, and
        # apply_chat_template(tokenize=True) changed its return type across transformers versions.
        texts = [self.tokenizer.apply_chat_template(m, add_generation_prompt=True, tokenize=False, **self.template_kwargs)
                 for m in messages]
        return [list(ids) for ids in self.tokenizer(texts, add_special_tokens=False)["input_ids"]]

    def _fit_length(self, prompt_ids: list[list[int]], path: Path) -> list[int]:
        """Row positions to keep; truncates `prompt_ids` in place for "left"/"right"."""
        limit = self.max_prompt_length
        long_rows = [i for i, ids in enumerate(prompt_ids) if len(ids) > limit]
        if not long_rows:
            return list(range(len(prompt_ids)))
        prefix = self.config_prefix
        if self.truncation == "error":
            longest = max(len(prompt_ids[i]) for i in long_rows)
            raise DataError(
                f"{prefix}.max_prompt_length={limit} but {len(long_rows)} prompts in {path} are longer "
                f"(max {longest}); raise it or set {prefix}.truncation=filter"
            )
        if self.truncation == "filter":
            logger.warning("%s: dropped %d of %d prompts longer than %s.max_prompt_length=%d",
                           path, len(long_rows), len(prompt_ids), prefix, limit)
            self.num_filtered += len(long_rows)
            dropped = set(long_rows)
            return [i for i in range(len(prompt_ids)) if i not in dropped]
        for i in long_rows:
            prompt_ids[i] = prompt_ids[i][-limit:] if self.truncation == "left" else prompt_ids[i][:limit]
        return list(range(len(prompt_ids)))


def padding_id(tokenizer) -> int:
    """The id batches are padded with. Many chat tokenizers define no pad token; padding is masked out, so eos serves."""
    pad = tokenizer.pad_token_id
    pad = tokenizer.eos_token_id if pad is None else pad
    if pad is None:
        raise ValueError("tokenizer has neither pad_token nor eos_token; set one of them on the tokenizer")
    return pad


def as_messages(prompt, path: Path, row: int, key: str) -> list[dict]:
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    if isinstance(prompt, (list, tuple, np.ndarray)) and all(
        isinstance(m, dict) and "role" in m and "content" in m for m in prompt
    ):
        return [dict(m) for m in prompt]
    raise DataError(
        f"{path} row {row}: field {key!r} must be a string or a list of {{role, content}} messages, "
        f"got {type(prompt).__name__} — {REGENERATE_HINT}"
    )


# ---- batching -----------------------------------------------------------------------------------
def collate_prompts(items: Sequence[PromptItem], pad_token_id: int) -> Batch:
    """LEFT-padded prompts (generation continues from the right edge) and their per-row values."""
    if not items:
        raise ValueError("collate_prompts: no items to collate")
    input_ids, attention_mask = left_padded([item.prompt_ids for item in items], pad_token_id)
    non_tensors = {
        "data_source": _object_array([item.data_source for item in items]),
        "ground_truth": _object_array([item.ground_truth for item in items]),
        "index": _object_array([item.index for item in items]),
        "raw_prompt": _object_array([item.raw_prompt for item in items]),
        "extra_info": _object_array([item.extra_info for item in items]),
    }
    return Batch({"input_ids": input_ids, "attention_mask": attention_mask}, non_tensors).check("dataset")


def left_padded(sequences: Sequence[Sequence[int]], pad_token_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token sequences as LEFT-padded (input_ids, attention_mask), each (B, longest)."""
    width = max(len(ids) for ids in sequences)
    input_ids = torch.full((len(sequences), width), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for row, ids in enumerate(sequences):
        if ids:
            input_ids[row, width - len(ids):] = torch.tensor(list(ids), dtype=torch.long)
            attention_mask[row, width - len(ids):] = 1
    return input_ids, attention_mask


def _object_array(values: list) -> np.ndarray:
    # Filled one element at a time: `array[:] = values` would let numpy broadcast equal-length
    # lists (every raw_prompt with 2 messages) into a 2-D array and fail.
    array = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):
        array[i] = value
    return array
