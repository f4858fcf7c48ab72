"""Statistics over the valid tokens of a batch, for the estimators that whiten (GAE, REINFORCE++).

Padding must not move the mean or the variance, so every statistic here is taken only where the
mask is nonzero; the result still has the input's shape and its padded positions are meaningless,
so callers multiply by the mask.
"""

from __future__ import annotations

import torch


def masked_whiten(
    values: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True
) -> torch.Tensor:
    """(values − mean)·rsqrt(var + 1e-8) over valid tokens, unbiased var (verl's masked_whiten).

    shift_mean=False adds the original mean back after scaling, as verl does.
    """
    mask = mask.to(values.dtype)  # response_mask arrives as an integer tensor
    count = mask.sum()
    if count < 2:
        raise ValueError(
            f"whitening needs at least 2 valid tokens for an unbiased variance, got {int(count)}; "
            "use a larger batch or an estimator that does not whiten (grpo, rloo, remax)"
        )
    mean = (values * mask).sum() / count
    var = ((values - mean).square() * mask).sum() / (count - 1)  # Bessel-corrected
    whitened = (values - mean) * torch.rsqrt(var + 1e-8)
    return whitened if shift_mean else whitened + mean
