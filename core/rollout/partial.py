"""Partial rollouts: a batch generated in segments of a few tokens, so a weight sync can interrupt it.

With `trainer.partial_rollout=true` (under `trainer.schedule=async`) the rollout thread does not hold the
engine for a whole batch: it generates `trainer.partial_rollout_chunk` tokens per response, lets a waiting
weight sync in, then continues the unfinished responses from where they stopped, on whatever weights the
engine holds now (the partial rollouts of Kimi k1.5, 2025, and AReaL, Fu et al. 2025). A response may thus
hold tokens of several weight versions; each token's `rollout_log_probs` come from the weights that
sampled it, so the off-policy correction (`algorithm.rollout_correction`) weighs every token against the
policy that produced it. A row's `policy_version` is its oldest token's, which the staleness bound checks.

Works with any backend: a continuation is an ordinary `generate` call whose prompt is the original prompt
followed by the response so far (n=1 per row).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np
import torch

from core.data.batch import Batch
from core.rollout.base import SamplingParams, assemble_rollout

Generate = Callable[[Batch, SamplingParams], Batch]


def generate_in_segments(first: Generate, cont: Generate, prompts: Batch, params: SamplingParams, chunk: int,
                         before_segment: Callable[[], int], eos_token_id: int, pad_token_id: int) -> Batch:
    """`prompts` → the rollout batch `first(prompts, params)` would give, generated `chunk` tokens at a time.

    `first` generates the n samples per prompt (the trainer's `generate`, which also tags groups), `cont`
    continues single rows; `before_segment()` runs before every segment (the schedule lets a weight sync
    in there) and returns the engine's weight version, recorded per row: `policy_version` (the first
    segment's) and `policy_version_last` (the last segment that extended the row)."""
    version = before_segment()
    step = replace(params, max_new_tokens=min(chunk, params.max_new_tokens))
    batch = first(prompts, step)
    rows = len(batch)
    tokens = [_valid(batch, row) for row in range(rows)]  # per row: (token ids, their log-probs)
    last_version = np.full(rows, version)
    open_rows = [row for row in range(rows) if _unfinished(tokens[row][0], step.max_new_tokens, eos_token_id)]
    segments = 1
    while open_rows:
        room = params.max_new_tokens - min(len(tokens[row][0]) for row in open_rows)
        open_rows = [row for row in open_rows if len(tokens[row][0]) < params.max_new_tokens]
        if not open_rows or room <= 0:
            break
        version = before_segment()
        step = replace(params, n=1, max_new_tokens=min(chunk, room))
        seed = None if params.seed is None else params.seed + 7919 * segments  # a fresh stream per segment
        extension = cont(_continuation_prompts(batch, open_rows, tokens, pad_token_id), replace(step, seed=seed))
        still_open = []
        for position, row in enumerate(open_rows):
            ids, log_probs = _valid(extension, position)
            tokens[row] = (tokens[row][0] + ids, tokens[row][1] + log_probs)
            last_version[row] = version
            if _unfinished(ids, step.max_new_tokens, eos_token_id):
                still_open.append(row)
        open_rows, segments = still_open, segments + 1
    return _assembled(prompts, batch, tokens, last_version, params, eos_token_id, pad_token_id, segments)


def _valid(batch: Batch, row: int) -> tuple[list[int], list[float]]:
    """Row `row`'s generated tokens up to and including its EOS, and their log-probs."""
    length = int(batch["response_mask"][row].sum())
    return batch["responses"][row, :length].tolist(), batch["rollout_log_probs"][row, :length].tolist()


def _unfinished(ids: list[int], budget: int, eos_token_id: int) -> bool:
    """A response that used its whole segment without an EOS: it goes on in the next segment."""
    return len(ids) == budget and eos_token_id not in ids


def _continuation_prompts(batch: Batch, rows: list[int], tokens, pad_token_id: int) -> Batch:
    """The rows' prompts followed by their responses so far, left-padded, as a prompt batch."""
    sequences = []
    for row in rows:
        prompt_mask = batch["attention_mask"][row, : batch["prompts"].shape[1]].bool()
        sequences.append(batch["prompts"][row][prompt_mask].tolist() + tokens[row][0])
    width = max(len(ids) for ids in sequences)
    input_ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, ids in enumerate(sequences):
        input_ids[i, width - len(ids):] = torch.tensor(ids, dtype=torch.long)
        attention_mask[i, width - len(ids):] = 1
    position_ids = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)
    non_tensors = {key: value[rows] for key, value in batch.non_tensors.items()}
    return Batch({"input_ids": input_ids, "attention_mask": attention_mask, "position_ids": position_ids},
                 non_tensors, dict(batch.meta))


def _assembled(prompts: Batch, first: Batch, tokens, last_version: np.ndarray, params: SamplingParams,
               eos_token_id: int, pad_token_id: int, segments: int) -> Batch:
    """The rows' joined segments as one rollout batch, in the first segment's row order."""
    width = max(1, max(len(ids) for ids, _ in tokens))
    responses = torch.full((len(tokens), width), pad_token_id, dtype=torch.long)
    log_probs = torch.zeros((len(tokens), width), dtype=torch.float32)
    for row, (ids, row_log_probs) in enumerate(tokens):
        responses[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        log_probs[row, : len(ids)] = torch.tensor(row_log_probs, dtype=torch.float32)
    batch = assemble_rollout(prompts, responses, log_probs, eos_token_id, params.n)
    batch.non_tensors.update(first.non_tensors)  # what the first call tagged (groups), row for row
    batch.non_tensors["policy_version_last"] = last_version.astype(object)
    batch.meta["partial_rollout_segments"] = segments
    return batch
