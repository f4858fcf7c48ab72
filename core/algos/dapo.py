"""DAPO's data-side pieces (Yu et al. 2025): the dynamic-sampling filter and overlong shaping.

Its loss-side pieces are config, not code: clip-higher (actor.clip_ratio_high=0.28), dual clip
c=10, token-mean aggregation, no KL. Both functions here are pure; the trainer decides when to
generate more and adds the penalty to the outcome reward.
"""

from __future__ import annotations

import numpy as np
import torch

from core.algos.advantages import group_indices


def uniform_groups(scores: torch.Tensor | np.ndarray, group_ids: np.ndarray) -> np.ndarray:
    """(B,) bool: True for rows whose group's scores are all equal; keep rows with `~uniform`.

    Such a group has zero group-relative advantage, so it adds no gradient, only dilutes the batch
    (dynamic sampling, DAPO). A group of one is never uniform: verl keeps singletons, otherwise
    rollout.n=1 could never fill a batch.
    """
    if isinstance(scores, torch.Tensor):
        scores = scores.detach().cpu().numpy()
    scores = np.asarray(scores)  # (B,)
    if len(group_ids) != len(scores):
        raise ValueError(
            f"group_ids has {len(group_ids)} entries but there are {len(scores)} scores; "
            "pass one uid per response"
        )
    uniform = np.zeros(len(scores), dtype=bool)  # (B,)
    for rows in group_indices(group_ids):
        group = scores[rows]  # (n,)
        uniform[rows] = len(rows) > 1 and bool(np.all(group == group[0]))
    return uniform


def overlong_penalty(
    response_lengths: torch.Tensor | np.ndarray,
    max_response_length: int,
    overlong_buffer_len: int,
    penalty_factor: float,
) -> torch.Tensor:
    """(B,) float reward to add: 0 up to L_max − L_buf, then linear down to −factor at L_max."""
    if not 0 < overlong_buffer_len <= max_response_length:
        raise ValueError(
            f"reward.overlong_buffer.len={overlong_buffer_len} but it must be in "
            f"(0, data.max_response_length={max_response_length}]; DAPO uses 4096 of 20480, "
            "i.e. the last fifth of the response budget"
        )
    lengths = torch.as_tensor(response_lengths).to(torch.get_default_dtype())  # (B,)
    expected_len = max_response_length - overlong_buffer_len
    # DAPO (Yu et al. 2025): r += min(−(L − (L_max − L_buf)) / L_buf · factor, 0).
    return torch.clamp(-(lengths - expected_len) / overlong_buffer_len * penalty_factor, max=0.0)
