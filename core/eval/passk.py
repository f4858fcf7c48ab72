"""pass@k and mean@k over n samples per prompt."""

from __future__ import annotations

import numpy as np


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct (Chen et al. 2021, "Evaluating LLMs trained on code").

    1 − C(n−c, k)/C(n, k), computed as a product so large n does not overflow.
    """
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def ks_for(n: int) -> list[int]:
    """1, 2, 4, … up to n, and n itself: the k values reported for n samples per prompt."""
    ks = [k for k in (2**i for i in range(n.bit_length())) if k <= n]
    return ks if ks[-1] == n else ks + [n]
