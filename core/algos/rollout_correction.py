"""Off-policy correction with the rollout engine's own log-probs (`algorithm.rollout_correction`).

The tokens were sampled by the rollout engine's policy π_rollout, which differs from the trainer's
π_old when the engines' numerics differ (bf16 vLLM against an fp32 trainer) or when the rollout ran
on older weights (the one-step off-policy schedule). Each valid token gets the ratio
ρ_t = π_old(y_t) / π_rollout(y_t) and, from it, a weight w_t that multiplies its policy-gradient
loss; w_t carries no gradient. A mode is a registered function ρ -> w:

- tis: w = min(ρ, C), truncated importance sampling (Yao et al. 2025, "Your efficient RL framework
  secretly brings you off-policy RL training"; their C = 2);
- mask: w = 1 where low ≤ ρ ≤ high, else 0: a token whose ratio leaves the band is dropped from the
  gradient (masked importance sampling, Liu, Li et al. 2025, "When speed kills stability");
- tis_mask: both, min(ρ, C) inside the band and 0 outside.
"""

from __future__ import annotations

import torch

from core.algos.registry import Registry

ROLLOUT_CORRECTIONS = Registry("rollout correction")
NO_CORRECTION = "none"  # the config value that switches the correction off
TRUNCATING, MASKING = ("tis", "tis_mask"), ("mask", "tis_mask")  # which modes report which fraction


@ROLLOUT_CORRECTIONS.register("tis")
def truncated_weights(ratio: torch.Tensor, *, tis_cap: float, mask_low: float, mask_high: float) -> torch.Tensor:
    return ratio.clamp(max=tis_cap)


@ROLLOUT_CORRECTIONS.register("mask")
def band_mask_weights(ratio: torch.Tensor, *, tis_cap: float, mask_low: float, mask_high: float) -> torch.Tensor:
    return _inside_band(ratio, mask_low, mask_high).to(ratio.dtype)


@ROLLOUT_CORRECTIONS.register("tis_mask")
def truncated_band_mask_weights(ratio: torch.Tensor, *, tis_cap: float, mask_low: float,
                                mask_high: float) -> torch.Tensor:
    return torch.where(_inside_band(ratio, mask_low, mask_high), ratio.clamp(max=tis_cap), 0.0)


def _inside_band(ratio: torch.Tensor, low: float, high: float) -> torch.Tensor:
    return (ratio >= low) & (ratio <= high)


def rollout_importance_ratio(old_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor) -> torch.Tensor:
    """ρ = π_old / π_rollout per token, (B, T_resp); the log-ratio is clamped to ±20 before exp, as in
    the PPO ratio, so one token the rollout found near-impossible cannot make it inf."""
    return torch.exp(torch.clamp(old_log_probs - rollout_log_probs, min=-20.0, max=20.0))


def rollout_correction_weights(
    old_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor, response_mask: torch.Tensor, *, mode: str,
    tis_cap: float, mask_low: float, mask_high: float,
) -> tuple[torch.Tensor, dict[str, float]]:
    """(weights (B, T_resp), zero off the response, no gradient; `rollout_corr/*` metrics over the valid
    tokens: the ratio's mean, max and min, the fraction truncated at the cap and the fraction masked)."""
    with torch.no_grad():
        ratio = rollout_importance_ratio(old_log_probs, rollout_log_probs)  # (B, T_resp)
        weights = ROLLOUT_CORRECTIONS.get(mode)(ratio, tis_cap=tis_cap, mask_low=mask_low, mask_high=mask_high)
        valid = response_mask.bool()
        weights = weights * valid
        metrics = {"rollout_corr/weight_mean": _fraction(weights, valid)}
        if valid.any():
            metrics.update({"rollout_corr/ratio_mean": ratio[valid].mean().item(),
                            "rollout_corr/ratio_max": ratio[valid].max().item(),
                            "rollout_corr/ratio_min": ratio[valid].min().item()})
        if mode in TRUNCATING:
            metrics["rollout_corr/truncated_frac"] = _fraction((ratio > tis_cap) & (weights > 0), valid)
        if mode in MASKING:
            metrics["rollout_corr/masked_frac"] = _fraction(~_inside_band(ratio, mask_low, mask_high), valid)
    return weights, metrics


def _fraction(values: torch.Tensor, valid: torch.Tensor) -> float:
    """Mean of `values` over the valid tokens (0 when there are none)."""
    return (values.float() * valid).sum().item() / max(int(valid.sum()), 1)
