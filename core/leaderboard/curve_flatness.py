"""Whether a recipe's held-out curve has flattened by its last step: the gain of each run's suite mean over the
last quarter of its steps, summarised over seeds.

Each run's validated suite mean (suite_rank.with_suite_history) at its last validated step T is compared with
its value at the latest validated step at or before 0.75 · T (step 28 of 40 when it validates every 4 steps).
Over the seeds that gain gets a mean and a 95% t-interval (seed_stats.SeedStats): *still rising* when the whole
interval lies above 0, *falling* when below, *flat* when it lies within ± FLAT_BAND (an equivalence reading), else
*unclear* (too few seeds, or too much spread, to say). One test per recipe at α = 0.05, not corrected across
recipes: a reading of each curve, not a ranking. Runs whose steps differ from most of their recipe's runs (one
stopped early) are left out of that recipe's figure; where no steps are shared by most, the full budget's run is read.
"""

from __future__ import annotations

from collections import Counter

from core.leaderboard.seed_stats import SeedStats
from core.leaderboard.suite_rank import SUITE_CURVE_KEY, with_suite_history

LATE_SHARE = 0.25  # the part of the run whose gain is read
# Suite-mean points a last quarter may add and still count as flat: under a tenth of the 15-25 points these
# suites' runs gain in all.
FLAT_BAND = 0.02


def late_gain(run: dict, key: str = SUITE_CURVE_KEY) -> tuple[int, int, float] | None:
    """(from step, to step, gain) of one run's validated curve `key` (by default its suite mean) over the last
    LATE_SHARE of its steps; None without two validated steps that far apart."""
    points = with_suite_history(run, SUITE_CURVE_KEY)["history"].get(key, [])
    if len(points) < 2:
        return None
    last_step, last_value = points[-1]
    cut = last_step * (1 - LATE_SHARE)
    earlier = [(step, value) for step, value in points[:-1] if step <= cut]
    if not earlier:
        return None
    from_step, from_value = earlier[-1]
    return int(from_step), int(last_step), last_value - from_value


def curve_reading(stats: SeedStats) -> str:
    interval = stats.interval
    if interval is None:
        return "one seed"
    low, high = interval
    if low > 0:
        return "still rising"
    if high < 0:
        return "falling"
    return "flat" if low >= -FLAT_BAND and high <= FLAT_BAND else "unclear"


def flatness_lines(rows: list, key: str = SUITE_CURVE_KEY, label: str = "validated suite mean") -> list[str]:
    """A table: per recipe, the late gain of its curve `key` (`label` on the page) over seeds and what it says
    about the curve. Nothing without curves."""
    lines = []
    for row in rows:
        gains = [gain for member in row.runs if (gain := late_gain(member.train_run, key)) is not None]
        if not gains:
            continue
        # Most runs' steps (a stopped run's differ); where no steps are shared most, the latest: the full budget.
        steps = max(Counter((a, b) for a, b, _ in gains).items(), key=lambda item: (item[1], item[0][1]))[0]
        stats = SeedStats(tuple(gain for a, b, gain in gains if (a, b) == steps))
        low_high = "" if stats.interval is None else f"[{stats.interval[0]:+.3f}, {stats.interval[1]:+.3f}]"
        std = "n/a" if stats.std is None else f"{stats.std:.3f}"
        lines.append(f"| {row.recipe} | {steps[0]} → {steps[1]} | {stats.n} | {stats.mean:+.3f} ± {std} | "
                     f"{low_high} | {curve_reading(stats)} |")
    if not lines:
        return []
    return ["", f"Whether each curve has flattened: the gain of the {label} over the last quarter of "
            "the steps, per seed, then mean ± std and its 95% t-interval; *still rising* / *falling* when the "
            f"interval lies above / below 0, *flat* when it lies within ±{FLAT_BAND}, else *unclear* (one test per "
            "recipe, α = 0.05; curve_flatness.py).", "",
            "| recipe | steps | seeds | gain | 95% interval | curve |", "|---|---|---:|---:|---|---|", *lines]
