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

from collections.abc import Callable, Collection
from dataclasses import replace

import numpy as np

from core.batch import Batch
from core.data.dataset import left_padded
from core.rollout.base import SamplingParams, rollout_from_token_lists

Generate = Callable[[Batch, SamplingParams], Batch]


def generate_in_segments(first: Generate, cont: Generate, prompts: Batch, params: SamplingParams, chunk: int,
                         before_segment: Callable[[], int], stop_ids: Collection[int], pad_token_id: int) -> Batch:
    """`prompts` → the rollout batch `first(prompts, params)` would give, generated `chunk` tokens at a time.

    `first` generates the n samples per prompt (the trainer's `generate`, which also tags groups), `cont`
    continues single rows; `before_segment()` runs before every segment (the schedule lets a weight sync
    in there) and returns the engine's weight version, recorded per row: `policy_version` (the first
    segment's) and `policy_version_last` (the last segment that extended the row). A response that filled its
    segment goes on unless it ended on one of `stop_ids` (`stop_token_ids`)."""
    version = before_segment()
    length = min(chunk, params.max_new_tokens)  # tokens every still-open response has: each used its budget
    batch = first(prompts, replace(params, max_new_tokens=length))
    tokens = [_valid(batch, row) for row in range(len(batch))]  # per row: (token ids, their log-probs)
    last_version = np.full(len(batch), version)
    open_rows = [row for row, (ids, _) in enumerate(tokens) if _unfinished(ids, length, stop_ids)]
    segments = 1
    while open_rows and length < params.max_new_tokens:
        version = before_segment()
        budget = min(chunk, params.max_new_tokens - length)
        seed = None if params.seed is None else params.seed + 7919 * segments  # a fresh stream per segment
        extension = cont(_continuation_prompts(batch, open_rows, tokens, pad_token_id),
                         replace(params, n=1, max_new_tokens=budget, seed=seed))
        added = [_valid(extension, position) for position in range(len(open_rows))]
        for row, (ids, log_probs) in zip(open_rows, added):
            tokens[row] = (tokens[row][0] + ids, tokens[row][1] + log_probs)
            last_version[row] = version
        open_rows = [row for row, (ids, _) in zip(open_rows, added) if _unfinished(ids, budget, stop_ids)]
        length, segments = length + budget, segments + 1
    rollout = rollout_from_token_lists(prompts, [ids for ids, _ in tokens], [lp for _, lp in tokens],
                                       pad_token_id, params.n)
    rollout.non_tensors.update(batch.non_tensors)  # what the first call tagged (groups), row for row
    rollout.non_tensors["policy_version_last"] = last_version.astype(object)
    rollout.meta["partial_rollout_segments"] = segments
    return rollout


def _valid(batch: Batch, row: int) -> tuple[list[int], list[float]]:
    """Row `row`'s generated tokens up to and including its EOS, and their log-probs."""
    length = int(batch["response_mask"][row].sum())
    return batch["responses"][row, :length].tolist(), batch["rollout_log_probs"][row, :length].tolist()


def _unfinished(ids: list[int], budget: int, stop_ids: Collection[int]) -> bool:
    """A response that used its whole segment and did not end on a stop token: it goes on in the next segment.
    (An engine stops at its first stop token, so only the last one can be.)"""
    return len(ids) == budget and ids[-1] not in stop_ids


def _continuation_prompts(batch: Batch, rows: list[int], tokens, pad_token_id: int) -> Batch:
    """The rows' prompts followed by their responses so far, left-padded, as a prompt batch."""
    prompt_width = batch["prompts"].shape[1]
    sequences = [batch["prompts"][row][batch["attention_mask"][row, :prompt_width].bool()].tolist() + tokens[row][0]
                 for row in rows]
    input_ids, attention_mask = left_padded(sequences, pad_token_id)
    non_tensors = {key: value[rows] for key, value in batch.non_tensors.items()}
    return Batch({"input_ids": input_ids, "attention_mask": attention_mask}, non_tensors, dict(batch.meta))
