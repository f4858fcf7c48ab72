"""core/leaderboard/ranks_by_step.py by hand: the validated suite means of each step ranked by the same tests as the
table, a row with fewer than two runs at a step unranked, and a step with fewer than two ranked rows left out."""

from types import SimpleNamespace

from core.leaderboard.ranks_by_step import ranks_by_step_lines, validated_means


def row(recipe: str, curves: list[dict[int, float]]) -> SimpleNamespace:
    """A recipe whose runs validated one reasoning-gym task (so the suite mean is that task) at the given steps."""
    runs = [{"history": {"val/reasoning_gym/aiw/acc": [[step, value] for step, value in curve.items()]}}
            for curve in curves]
    return SimpleNamespace(recipe=recipe, runs=[SimpleNamespace(train_run=run) for run in runs])


def test_each_step_ranks_the_runs_that_validated_there():
    high = row("high", [{0: 0.1, 8: 0.50, 16: 0.60}, {0: 0.1, 8: 0.52, 16: 0.62}, {0: 0.1, 8: 0.51, 16: 0.61}])
    low = row("low", [{0: 0.1, 8: 0.20, 16: 0.59}, {0: 0.1, 8: 0.22, 16: 0.63}, {0: 0.1, 8: 0.21, 16: 0.61}])
    # one run of "late" validated at step 16 only: unranked there, and absent from the earlier steps
    late = row("late", [{16: 0.9}])
    assert validated_means([high, low, late])[16] == {"high": (0.60, 0.62, 0.61), "low": (0.59, 0.63, 0.61),
                                                      "late": (0.9,)}
    lines = ranks_by_step_lines([high, low, late])
    assert lines[-5] == "| step | groups | high | low | late |"
    # step 0: all equal (the same start), one group. Step 8: 0.51 vs 0.21, std 0.01 each, n 3:
    # t = 0.30 / √(2 · 0.0001 / 3) = 36.7, p ≈ 4e-6 (the only pair, so Holm leaves it): low is rank 2.
    # Step 16: 0.61 vs 0.61, no test separates them: one group again.
    assert lines[-3:] == ["| 0 | 1 | 1 (0.100) | 1 (0.100) | — |",
                          "| 8 | 2 | 1 (0.510) | 2 (0.210) | — |",
                          "| 16 | 1 | 1 (0.610) | 1 (0.610) | — |"]


def test_nothing_to_read_without_two_ranked_rows_at_two_steps():
    single = row("only", [{0: 0.1, 8: 0.2}, {0: 0.1, 8: 0.3}])
    assert ranks_by_step_lines([single]) == []
    one_seed = row("one", [{0: 0.1, 8: 0.2}])
    assert ranks_by_step_lines([single, one_seed]) == []
    assert ranks_by_step_lines([row("a", [{8: 0.2}, {8: 0.3}]), row("b", [{8: 0.2}, {8: 0.4}])]) == []  # one step
