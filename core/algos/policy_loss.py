"""Policy-gradient losses: per-token surrogate, then `aggregate_loss` to a scalar.

Every loss takes `ppo_clip_loss`'s arguments and ignores the options it does not use, so the actor
calls any of them the same way and a recipe switches loss with one config line (`actor.policy_loss`).
Every loss returns (loss, metrics): loss is this micro-batch's share of the global mini-batch
loss (see aggregation.py), metrics are python floats averaged over this micro-batch's valid
tokens, for logging only.
"""

from __future__ import annotations

import torch

from core.algos.aggregation import aggregate_loss
from core.algos.registry import Registry

POLICY_LOSSES = Registry("policy loss")


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of `values` over positions where mask is nonzero (0 if there are none)."""
    mask = mask.to(values.dtype)
    return (values * mask).sum() / mask.sum().clamp(min=1)


def clamped_ratio(log_probs: torch.Tensor, old_log_probs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(log ρ, ρ) per token, ρ = π/π_old; log ρ clamped to ±20 before exp so one stale token cannot
    overflow the ratio to inf."""
    log_ratio = torch.clamp(log_probs - old_log_probs, min=-20.0, max=20.0)  # (B, T_resp)
    return log_ratio, torch.exp(log_ratio)


@POLICY_LOSSES.register("vanilla", "ppo_clip")
def ppo_clip_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    clip_ratio_low: float = 0.2,
    clip_ratio_high: float = 0.2,
    clip_ratio_c: float = 3.0,
    loss_agg_mode: str = "token-mean",
    num_tokens: int,
    num_seqs: int,
    max_response_length: int,
    token_weights: torch.Tensor | None = None,
    **_,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped PPO surrogate with clip-higher and dual clip; all tensors (B, T_resp).

    `token_weights` (no gradient) scale each token's clipped loss: the off-policy correction's
    importance weights (rollout_correction.py); None: every token weighs 1."""
    if clip_ratio_c <= 1.0:
        raise ValueError(
            f"clip_ratio_c={clip_ratio_c} but dual clip needs c > 1 (it caps the loss of a "
            "negative-advantage token at -A·c); use 3.0 (Ye et al. 2020) or 10.0 (DAPO)"
        )
    log_ratio, ratio = clamped_ratio(log_probs, old_log_probs)  # (B, T_resp)

    # PPO (Schulman et al. 2017); asymmetric ε_low/ε_high is clip-higher (DAPO, Yu et al. 2025).
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_ratio_low, 1.0 + clip_ratio_high)
    clip_loss = torch.maximum(unclipped, clipped)

    # Dual clip (Ye et al. 2020): for A < 0 a huge ratio would give an unbounded loss; cap at -A·c.
    dual_cap = -advantages * clip_ratio_c
    negative = advantages < 0
    loss_mat = torch.where(negative, torch.minimum(clip_loss, dual_cap), clip_loss)  # (B, T_resp)
    if token_weights is not None:
        loss_mat = loss_mat * token_weights

    loss = aggregate_loss(
        loss_mat,
        response_mask,
        loss_agg_mode,
        num_tokens=num_tokens,
        num_seqs=num_seqs,
        max_response_length=max_response_length,
    )
    with torch.no_grad():
        metrics = {
            "pg_clipfrac": masked_mean((clipped > unclipped).float(), response_mask).item(),
            "pg_clipfrac_lower": masked_mean(
                (negative & (clip_loss > dual_cap)).float(), response_mask
            ).item(),
            "ppo_kl": masked_mean(-log_ratio, response_mask).item(),
        }
    return loss, metrics
