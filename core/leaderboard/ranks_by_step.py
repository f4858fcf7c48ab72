"""How the ranking reads along the way: the ranks at each step where the runs validated.

The table's ranks (before_after.section_ranking) rest on each run's evaluation after training. The runs also
validated the same tasks every `trainer.test_freq` steps (their histories), so the same Holm-corrected Welch tests
(ranking.py) can rank the validated figures (a suite's means, or GSM8K's accuracy) step by step. That shows
whether the grouping has settled by the last step: a budget whose final ranks differ from those a few validations
earlier has not shown that its groups hold. Each step counts the runs that validated at it; a row with fewer than
two of them there is not ranked (`—`), and a step where fewer than two rows are ranked is left out.
"""

from __future__ import annotations

from core.leaderboard.ranking import rank_by_significance
from core.leaderboard.suite_rank import SUITE_CURVE_KEY, with_suite_history


def validated_means(rows: list, key: str = SUITE_CURVE_KEY) -> dict[int, dict[str, tuple[float, ...]]]:
    """step -> recipe -> the validated figures `key` (by default the suite means) of that recipe's runs at that
    step, every row named."""
    by_step: dict[int, dict[str, list[float]]] = {}
    for row in rows:
        for member in row.runs:
            for step, value in with_suite_history(member.train_run, SUITE_CURVE_KEY)["history"].get(key, []):
                by_step.setdefault(int(step), {}).setdefault(row.recipe, []).append(value)
    return {step: {row.recipe: tuple(means.get(row.recipe, ())) for row in rows}
            for step, means in sorted(by_step.items())}


def ranks_by_step_lines(rows: list, key: str = SUITE_CURVE_KEY, label: str = "validated suite mean") -> list[str]:
    """A table: at each validated step, how many groups the tests on `key` (`label` on the page) separate and
    each recipe's rank (its mean)."""
    body = []
    for step, samples in validated_means(rows, key).items():
        if sum(len(values) >= 2 for values in samples.values()) < 2:
            continue
        ranking = rank_by_significance(samples)
        cells = [f"{rank} ({sum(samples[row.recipe]) / len(samples[row.recipe]):.3f})"
                 if (rank := ranking.ranks.get(row.recipe)) else "—" for row in rows]  # rank 0: under two runs
        body.append(f"| {step} | {ranking.groups} | " + " | ".join(cells) + " |")
    if len(body) < 2:
        return []
    return ["", "How the ranks read at each step where the runs validated (the same tasks; ranks_by_step.py): the "
            f"groups the same tests separate on the {label}s, and each recipe's rank (its mean over the "
            "runs that validated there).", "",
            "| step | groups | " + " | ".join(row.recipe for row in rows) + " |",
            "|---:|---:|" + "---:|" * len(rows), *body]
