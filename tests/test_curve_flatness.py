"""core/leaderboard/curve_flatness.py by hand: each run's suite-mean gain over its last quarter, and the reading over
seeds (still rising, falling, flat within the band, unclear)."""

from types import SimpleNamespace

from core.leaderboard.curve_flatness import FLAT_BAND, curve_reading, flatness_lines, late_gain
from core.leaderboard.seed_stats import SeedStats


def run(curves: dict[str, list[tuple[int, float]]]) -> dict:
    """A training run whose two reasoning-gym tasks validated at the given (step, accuracy) points."""
    return {"history": {f"val/reasoning_gym/{task}/acc": [[step, value] for step, value in points]
                        for task, points in curves.items()}}


def test_the_gain_runs_from_the_last_validation_at_or_before_three_quarters_of_the_steps():
    # Validated every 4 steps to 40: 0.75 · 40 = 30, so from step 28; suite means (a + b) / 2.
    steps = list(range(0, 41, 4))
    one = run({"a": [(s, 0.1 + 0.01 * s) for s in steps], "b": [(s, 0.3) for s in steps]})
    start, end, gain = late_gain(one)
    # step 28: (0.38 + 0.3) / 2 = 0.34; step 40: (0.50 + 0.3) / 2 = 0.40
    assert (start, end) == (28, 40) and abs(gain - 0.06) < 1e-12
    # A task missing at a step: that step has no suite mean, so the earlier point is step 24.
    gap = run({"a": [(s, 0.1 + 0.01 * s) for s in steps], "b": [(s, 0.3) for s in steps if s != 28]})
    assert late_gain(gap)[:2] == (24, 40)
    assert late_gain(run({"a": [(0, 0.1)], "b": [(0, 0.2)]})) is None


def test_readings_by_hand():
    # mean 0.02, std 0.01, n 3: t(2) = 4.303, half width 4.303 · 0.01 / √3 = 0.0248 -> [-0.0048, 0.0448]: unclear
    assert curve_reading(SeedStats((0.01, 0.02, 0.03))) == "unclear"
    assert curve_reading(SeedStats((0.03, 0.04, 0.05))) == "still rising"   # [0.0152, 0.0648]
    assert curve_reading(SeedStats((-0.05, -0.04, -0.03))) == "falling"
    # mean 0, std 0.002, n 4: t(3) = 3.182, half width 0.0032: inside ±FLAT_BAND
    assert FLAT_BAND == 0.02 and curve_reading(SeedStats((-0.002, 0.002, -0.002, 0.002))) == "flat"
    assert curve_reading(SeedStats((0.5,))) == "one seed"


def test_the_table_keeps_the_steps_most_runs_share():
    steps = list(range(0, 17, 4))
    full = [run({"a": [(s, 0.1 + 0.01 * s + 0.001 * seed) for s in steps], "b": [(s, 0.2) for s in steps]})
            for seed in range(3)]
    stopped = run({"a": [(s, 0.9) for s in (0, 4, 8)], "b": [(s, 0.9) for s in (0, 4, 8)]})  # a run stopped at 8
    row = SimpleNamespace(recipe="grpo", runs=[SimpleNamespace(train_run=r) for r in [*full, stopped]])
    lines = flatness_lines([row])
    # Each full run: step 12 -> 16 adds 0.04 on task a, so 0.02 on the suite mean; std 0: the interval is a point.
    assert lines[-1] == "| grpo | 12 → 16 | 3 | +0.020 ± 0.000 | [+0.020, +0.020] | still rising |"
    assert flatness_lines([SimpleNamespace(recipe="x", runs=[])]) == []


def test_without_a_majority_the_table_reads_the_full_budgets_steps():
    # Two of three runs stopped at steps 73 and 79 of 80 (validated every 8 and at the last step): each run has
    # its own steps, so the one that trained all 80 is read, not the first listed.
    def curve(last):
        points = [*range(0, last, 8), last]
        return run({"a": [(s, 0.01 * s) for s in points], "b": [(s, 0.0) for s in points]})
    row = SimpleNamespace(recipe="grpo", runs=[SimpleNamespace(train_run=curve(last)) for last in (73, 79, 80)])
    # 0.75 · 80 = 60, so from step 56: (0.80 - 0.56) / 2 = 0.12
    assert flatness_lines([row])[-1] == "| grpo | 56 → 80 | 1 | +0.120 ± n/a |  | one seed |"
