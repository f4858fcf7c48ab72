"""Critic loss: clipped squared error between predicted values and returns.

Like the policy losses it returns (loss, metrics): loss is this micro-batch's share of the global
mini-batch loss (see aggregation.py), metrics are python floats over this micro-batch's valid
tokens, for logging only.
"""

from __future__ import annotations

import torch

from core.algos.aggregation import aggregate_loss
from core.algos.policy_loss import masked_mean


def clipped_value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    cliprange_value: float = 0.5,
    loss_agg_mode: str,
    num_tokens: int,
    num_seqs: int,
    max_response_length: int,
) -> tuple[torch.Tensor, dict[str, float]]:
    """½·agg(max((V−R)², (clip(V, V_old ± ε_v) − R)²)); all tensors (B, T_resp)."""
    if cliprange_value <= 0:
        raise ValueError(
            f"critic cliprange_value={cliprange_value} but it must be > 0 (it bounds how far V "
            "may move from V_old per update); use 0.5, or a large value to disable clipping"
        )
    # PPO2 value clipping (Schulman et al. 2017, openai/baselines): the new prediction may move at
    # most ε_v from the rollout-time value, and the larger of the two errors is kept.
    step = torch.clamp(values - old_values, -cliprange_value, cliprange_value)  # (B, T_resp)
    clipped_values = old_values + step
    unclipped_sq = (values - returns).square()  # (B, T_resp)
    clipped_sq = (clipped_values - returns).square()  # (B, T_resp)
    loss_mat = torch.maximum(unclipped_sq, clipped_sq)  # (B, T_resp)

    loss = 0.5 * aggregate_loss(
        loss_mat,
        response_mask,
        loss_agg_mode,
        num_tokens=num_tokens,
        num_seqs=num_seqs,
        max_response_length=max_response_length,
    )
    with torch.no_grad():
        metrics = {
            "vf_clipfrac": masked_mean((clipped_sq > unclipped_sq).float(), response_mask).item(),
            "vpred_mean": masked_mean(values, response_mask).item(),
        }
    return loss, metrics
