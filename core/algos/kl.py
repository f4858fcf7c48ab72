"""Per-token KL estimators between the policy and the reference policy.

From Schulman 2020, "Approximating KL divergence" (http://joschu.net/blog/kl-approx.html),
with x = logπ − logπ_ref computed on tokens sampled from π.
"""

from __future__ import annotations

import torch

from core.algos.registry import Registry

KL_ESTIMATORS = Registry("KL estimator")


def kl_penalty(
    log_probs: torch.Tensor, ref_log_probs: torch.Tensor, estimator: str
) -> torch.Tensor:
    """Per-token KL estimate, (B, T_resp); mask and aggregate it yourself."""
    return KL_ESTIMATORS.get(estimator)(log_probs - ref_log_probs)


@KL_ESTIMATORS.register("k1", "kl")
def _k1(log_ratio: torch.Tensor) -> torch.Tensor:
    # k1 = x: unbiased, high variance, can be negative (Schulman 2020).
    return log_ratio


@KL_ESTIMATORS.register("k2", "mse")
def _k2(log_ratio: torch.Tensor) -> torch.Tensor:
    # k2 = ½x²: biased, low variance, always >= 0 (Schulman 2020).
    return 0.5 * log_ratio.square()


@KL_ESTIMATORS.register("k3", "low_var_kl")
def _k3(log_ratio: torch.Tensor) -> torch.Tensor:
    # k3 = e^{−x} + x − 1: unbiased, low variance, >= 0 (Schulman 2020).
    # Clamps keep one far-off-policy token from turning the loss into inf or a huge spike.
    x = torch.clamp(log_ratio, min=-20.0, max=20.0)
    return torch.clamp(torch.exp(-x) + x - 1.0, min=-10.0, max=10.0)
