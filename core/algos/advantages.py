"""Advantage estimators: token rewards -> (advantages, returns), both (B, T_resp).

Every estimator takes the same keywords, `fn(*, token_level_rewards, response_mask, group_ids,
**options)`, and ignores options it does not use, so the trainer calls any of them the same way
and a recipe switches estimator with one config line.
"""

from __future__ import annotations

import numpy as np
import torch

from core.algos.registry import Registry

ADV_ESTIMATORS = Registry("advantage estimator")


def group_indices(group_ids: np.ndarray) -> list[list[int]]:
    """Row indices of each group, groups in order of first appearance; rows may be interleaved."""
    groups: dict[object, list[int]] = {}
    for row, uid in enumerate(group_ids):
        groups.setdefault(uid, []).append(row)
    return list(groups.values())


@ADV_ESTIMATORS.register("grpo")
@torch.no_grad()
def grpo_advantages(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    group_ids: np.ndarray,
    epsilon: float = 1e-6,
    norm_adv_by_std: bool = True,
    **_,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Group-relative outcome advantage, broadcast over each response's valid tokens."""
    scores = token_level_rewards.sum(dim=-1)  # (B,) outcome reward r_i
    if len(group_ids) != scores.shape[0]:
        raise ValueError(
            f"group_ids has {len(group_ids)} entries but the batch has {scores.shape[0]} rows; "
            "pass one uid per response"
        )
    seq_adv = torch.empty_like(scores)  # (B,)
    for rows in group_indices(group_ids):
        r = scores[rows]  # (n,)
        if len(rows) == 1:
            # A lone sample has no group baseline: mean 0, std 1, so A = r_i.
            seq_adv[rows] = r
            continue
        # GRPO (Shao et al. 2024): A_i = (r_i − mean_g) / (std_g + ε), unbiased std.
        # Dr.GRPO (Liu et al. 2025) drops the std division: A_i = r_i − mean_g.
        centred = r - r.mean()
        seq_adv[rows] = centred / (r.std() + epsilon) if norm_adv_by_std else centred
    advantages = seq_adv.unsqueeze(-1) * response_mask.to(scores.dtype)  # (B, T_resp)
    return advantages, advantages.clone()
