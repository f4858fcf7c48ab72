"""Which recipes a leaderboard can tell apart: pairwise Welch t-tests, Holm's correction, shared ranks.

Each recipe has one figure per seed. For two recipes a and b, Welch's t-test (Welch 1947) asks whether
their means differ without assuming equal variances:

    t = (mean_a − mean_b) / √(s_a²/n_a + s_b²/n_b),
    df = (s_a²/n_a + s_b²/n_b)² / ((s_a²/n_a)²/(n_a − 1) + (s_b²/n_b)²/(n_b − 1)),

two-sided p = I_{df/(df+t²)}(df/2, 1/2), the regularized incomplete beta function (the Student-t tail).
The m = k(k−1)/2 pairs are corrected together by Holm's step-down method (Holm 1979): the i-th smallest p
is multiplied by m − i + 1, made non-decreasing, and a pair differs when that adjusted p is below α.

Ranks as LMSYS's Chatbot Arena marks them: a recipe's rank is 1 + the number of recipes significantly
better than it, so recipes that no test separates share a rank, and the number of distinct ranks is the
number of groups the table tells apart.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

ALPHA = 0.05


def _beta_continued_fraction(a: float, b: float, x: float, iterations: int = 300, eps: float = 1e-15) -> float:
    """The continued fraction of I_x(a, b), evaluated by the modified Lentz method (Press et al., §6.4)."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    result = d
    for m in range(1, iterations + 1):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            result *= d * c
        if abs(d * c - 1.0) < eps:
            break
    return result


def regularized_beta(a: float, b: float, x: float) -> float:
    """I_x(a, b) for a, b > 0 and 0 ≤ x ≤ 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):  # the fraction converges fast on this side; use symmetry on the other
        return math.exp(log_front) * _beta_continued_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_continued_fraction(b, a, 1.0 - x) / b


def t_two_sided_p(t: float, df: float) -> float:
    """P(|T| ≥ |t|) for Student's t with `df` (real, > 0) degrees of freedom."""
    return regularized_beta(df / 2.0, 0.5, df / (df + t * t))


@dataclass(frozen=True)
class WelchTest:
    t: float
    df: float
    p: float


def welch_test(a: tuple[float, ...], b: tuple[float, ...]) -> WelchTest:
    """Welch's two-sided t-test of mean(a) = mean(b); each needs at least two values."""
    if len(a) < 2 or len(b) < 2:
        raise ValueError(f"Welch's test needs at least 2 values per group, got {len(a)} and {len(b)}")
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    difference = statistics.fmean(a) - statistics.fmean(b)
    if va + vb == 0.0:  # both constant: equal means cannot differ, unequal ones differ without doubt
        return WelchTest(0.0 if difference == 0 else math.copysign(math.inf, difference), math.inf,
                         1.0 if difference == 0 else 0.0)
    t = difference / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    return WelchTest(t, df, t_two_sided_p(t, df))


def holm_adjust(p_values: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input's order."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted, running = [0.0] * m, 0.0
    for position, index in enumerate(order):
        running = max(running, min(1.0, (m - position) * p_values[index]))
        adjusted[index] = running
    return adjusted


@dataclass(frozen=True)
class Ranking:
    names: list[str]                            # in the order given
    ranks: dict[str, int]                        # 1 + how many are significantly better
    better: dict[str, list[str]]                 # name -> the names significantly better than it
    pairs: dict[tuple[str, str], tuple[WelchTest, float]]  # (a, b) -> (test of a vs b, Holm-adjusted p)
    alpha: float

    @property
    def groups(self) -> int:
        """How many distinct ranks: the significance-ranked groups the figures separate."""
        return len({rank for rank in self.ranks.values() if rank})


def rank_by_significance(samples: dict[str, tuple[float, ...]], alpha: float = ALPHA) -> Ranking:
    """Ranks of the named samples (higher is better) from Holm-corrected pairwise Welch tests.

    Names with fewer than two values cannot be tested: they are left unranked (rank 0, shown as `—`), and so is
    a lone testable name, as nothing is tested against it.
    """
    names = list(samples)
    testable = [name for name in names if len(samples[name]) >= 2]
    tested = testable if len(testable) >= 2 else []
    keys = [(a, b) for i, a in enumerate(tested) for b in tested[i + 1:]]
    tests = [welch_test(samples[a], samples[b]) for a, b in keys]
    adjusted = holm_adjust([test.p for test in tests])
    better: dict[str, list[str]] = {name: [] for name in names}
    for (a, b), test, p in zip(keys, tests, adjusted):
        if p < alpha:
            (better[b] if test.t > 0 else better[a]).append(a if test.t > 0 else b)
    ranks = {name: (1 + len(better[name]) if name in tested else 0) for name in names}
    return Ranking(names, ranks, better, {key: (test, p) for key, test, p in zip(keys, tests, adjusted)}, alpha)
