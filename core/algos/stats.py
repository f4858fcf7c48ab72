"""Statistics over the valid tokens of a batch, for the estimators that whiten (GAE, REINFORCE++).

Padding must not move the mean or the variance, so every statistic here is taken only where the
mask is nonzero; the result still has the input's shape and its padded positions are meaningless,
so callers multiply by the mask.
"""

from __future__ import annotations

from typing import Callable

import torch


def masked_whiten(
    values: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True,
    sum_over_ranks: Callable[[torch.Tensor], float] | None = None,
) -> torch.Tensor:
    """(values − mean)·rsqrt(var + 1e-8) over valid tokens, unbiased var (verl's masked_whiten).

    shift_mean=False adds the original mean back after scaling, as verl does. `sum_over_ranks` sums a
    scalar over the data-parallel ranks that each hold a part of the batch (torchrun), so the statistics
    are the whole batch's, as when one process holds all of it; None: this is the whole batch.
    """
    total = sum_over_ranks or (lambda value: value)
    mask = mask.to(values.dtype)  # response_mask arrives as an integer tensor
    count = total(mask.sum())
    if count < 2:
        raise ValueError(
            f"whitening needs at least 2 valid tokens for an unbiased variance, got {int(count)}; "
            "use a larger batch or an estimator that does not whiten (grpo, rloo, remax)"
        )
    mean = total((values * mask).sum()) / count
    var = total(((values - mean).square() * mask).sum()) / (count - 1)  # Bessel-corrected
    whitened = (values - mean) * (var + 1e-8) ** -0.5
    return whitened if shift_mean else whitened + mean
