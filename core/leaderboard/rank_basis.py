"""What a before → after section ranks its rows on: a task suite's mean, or a GSM8K section's GSM8K column.

A section with reasoning-gym tasks ranks on the suite mean (suite_rank.py). A section without them ranks on
GSM8K mean@1 under the grader its runs trained with (`reward.gsm8k_method`: the figure their reward optimised),
and tests MATH-500 mean@1 the same way, shown but not a rank. Either way only runs that trained every step count
in a test, and the curve read for flatness is the held-out figure the runs validated on.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from core.leaderboard.suite_rank import SUITE_CURVE_KEY, SUITE_MEAN, full_budget, run_suite_mean, suite_columns
from core.reward.manager import GSM8K_SOURCES

MATH_500_SOURCES = ("HuggingFaceH4/MATH-500", "math500")  # the MATH-500 column, under either name a file gives it


@dataclass(frozen=True)
class RankBasis:
    label: str                                  # what the tests compare, as the page names it
    curve_key: str                              # the validation history the curve readings use
    curve_label: str                            # that history, as the page names it
    value: Callable[[object], float | None]     # one run's figure (an EvalRow's)


def section_bases(rows: list, columns: list) -> list[RankBasis]:
    """The section's bases: the first ranks the rows, the rest are tested the same way. None without a figure."""
    suite = suite_columns(columns)
    if suite:
        return [RankBasis(SUITE_MEAN, SUITE_CURVE_KEY, "validated suite mean",
                          lambda member: run_suite_mean(member.after, suite))]
    methods = Counter(member.train_run["params"].get("reward.gsm8k_method") or "strict"
                      for row in rows for member in row.runs)
    if not methods:  # only the pretrained model: nothing to rank
        return []
    trained = methods.most_common(1)[0][0]
    bases = [_column_basis(column, f"validated {column.data_source} accuracy") for column in columns
             if column.data_source in GSM8K_SOURCES and column.metric == "mean@1" and column.grader == trained][:1]
    bases += [_column_basis(column, "") for column in columns
              if column.data_source in MATH_500_SOURCES and column.metric == "mean@1"][:1] if bases else []
    return bases


def _column_basis(column, curve_label: str) -> RankBasis:
    return RankBasis(column.name, f"val/{column.data_source}/acc", curve_label, lambda member: member.after.get(column))


def basis_samples(rows: list, basis: RankBasis) -> dict[str, tuple[float, ...]]:
    """Each row's figure per seed that trained the full budget."""
    return {row.recipe: tuple(value for member in row.runs if full_budget(member)
                              and (value := basis.value(member)) is not None) for row in rows}
