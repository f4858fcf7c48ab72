"""A task suite's summary in the before → after section: one mean over its tasks, ranks, and one start.

When a section's columns include reasoning-gym tasks (data sources `reasoning_gym/<task>`), each run's
*suite mean* is the mean of its mean@1 over those tasks (every task weighs the same), summarised over seeds
like any column, and the rows are ranked on it by Holm-corrected pairwise Welch tests (ranking.py).

Rows of one section are compared with each other, so they must share a starting point and a budget: one
pretrained model file (the `model_sha256` tag every run and evaluation carries) and the same
COMPARED_BUDGET_KEYS. `check_comparable` refuses a section that mixes them, naming the runs. A run its time
budget stopped before its last step trained a smaller budget: the table shows it (its row's *steps* say so), but
the tests and ranks leave it out, so a row whose runs were all stopped is unranked until a rerun makes them whole.
"""

from __future__ import annotations

from core.leaderboard.export import MODEL_SHA_TAG, STOPPED_TAG, LeaderboardError
from core.leaderboard.ranking import Ranking
from core.leaderboard.seed_power import separation_lines, spread_lines, suite_test_set_line, widest_task_runs_lines
from core.leaderboard.seed_stats import SeedStats
from core.reward.reasoning_gym import is_reasoning_gym

# What every row of a section must share (the learning rate is a recipe's own setting: LoRA rows tune theirs).
COMPARED_BUDGET_KEYS = ("trainer.total_steps", "data.train_batch_size", "rollout.n", "data.max_response_length",
                        "data.max_prompt_length", "rollout.temperature")
SUITE_MEAN = "suite mean"
SUITE_CURVE_KEY = "val/suite mean"  # the history with_suite_history adds


def suite_columns(columns: list) -> list:
    """The mean@1 columns of reasoning-gym tasks, in the section's order."""
    return [c for c in columns if is_reasoning_gym(c.data_source) and c.metric == "mean@1"]


def run_suite_mean(after: dict, columns: list) -> float | None:
    """One run's mean over the suite's tasks; None unless it has every task."""
    values = [after.get(column) for column in columns]
    return None if not columns or None in values else sum(values) / len(values)


def suite_stats(row, columns: list) -> SeedStats | None:
    values = tuple(v for member in row.runs if (v := run_suite_mean(member.after, columns)) is not None)
    return SeedStats(values) if values else None


def full_budget(member) -> bool:
    """Whether a row's run trained every step its budget set (its time budget did not stop it)."""
    return not member.train_run.get("tags", {}).get(STOPPED_TAG)


def suite_samples(rows: list, columns: list) -> dict[str, tuple[float, ...]]:
    """Each row's suite mean per seed that trained the full budget (those seeds that have every task)."""
    return {row.recipe: tuple(value for member in row.runs if full_budget(member)
                              and (value := run_suite_mean(member.after, columns)) is not None) for row in rows}


def stopped_runs_line(rows: list) -> list[str]:
    """Which rows' runs the tests leave out, as their budget stopped them (nothing when none was stopped)."""
    stopped = [f"{row.recipe} {count} of {len(row.runs)}" for row in rows
               if (count := sum(not full_budget(member) for member in row.runs))]
    return ["", "Left out of the tests, as they trained fewer steps than the budget (their time limit stopped "
            f"them): {', '.join(stopped)} runs; a row with fewer than two full runs is unranked (—)."] if stopped else []


def _describe(values: dict[str, list[str]]) -> str:
    return "; ".join(f"{value}: {', '.join(sorted(names))}" for value, names in sorted(values.items()))


def check_comparable(model: str, rows: list, befores: list[dict]) -> None:
    """Raise unless every run and evaluation of `model`'s section started from one model file and every run
    shares COMPARED_BUDGET_KEYS."""
    hashes: dict[str, list[str]] = {}
    for row in rows:
        for member in row.runs:
            run = member.train_run
            hashes.setdefault(run.get("tags", {}).get(MODEL_SHA_TAG) or "not recorded", []).append(
                f"{row.recipe} seed {run['seed']} (run {run['run_id']})")
    for entry in befores:
        hashes.setdefault(entry.get("model_sha256") or "not recorded", []).append(
            f"the pretrained model's evaluation {entry['run_id']}")
    if len(hashes) > 1:
        raise LeaderboardError(
            f"model {model!r}: its runs started from different model files (sha256 {_describe(hashes)}); rows from "
            "different starting points are never compared: rerun them from one file, or remove the odd runs")
    for key in COMPARED_BUDGET_KEYS:
        values: dict[str, list[str]] = {}
        for row in rows:
            for member in row.runs:
                values.setdefault(str(member.train_run["params"].get(key)), []).append(
                    f"{row.recipe} seed {member.train_run['seed']}")
        if len(values) > 1:
            raise LeaderboardError(
                f"model {model!r}: its runs trained under different budgets, {key} = {_describe(values)}; rows "
                "with different budgets are never compared: rerun them with one budget, or remove the odd runs")


def with_suite_history(run: dict, key: str) -> dict:
    """`run` with one more history, `key`: at each step where it validated every reasoning-gym task, their mean."""
    tasks = [points for name, points in run["history"].items()
             if name.startswith("val/") and name.endswith("/acc") and is_reasoning_gym(name[len("val/"):-len("/acc")])]
    by_step: dict[float, list[float]] = {}
    for points in tasks:
        for step, value in points:
            by_step.setdefault(step, []).append(value)
    mean = [[step, sum(values) / len(values)] for step, values in sorted(by_step.items()) if len(values) == len(tasks)]
    return {**run, "history": {**run["history"], key: mean}} if tasks else run


def rank_text(ranking: Ranking | None, recipe: str) -> str:
    rank = ranking.ranks.get(recipe, 0) if ranking else 0
    return str(rank) if rank else "—"


def ranking_lines(ranking: Ranking | None, rows: list, label: str = SUITE_MEAN, ranks: bool = True) -> list[str]:
    """How the ranks on `label` were made (with `ranks=False`: the same tests, shown but not a rank), which runs
    they leave out, and the pairs they rest on (folded)."""
    if ranking is None:
        return []
    if not ranking.pairs:
        what = "*rank*: none" if ranks else f"No tests on {label}"
        return ["", f"{what}, as no two rows have two runs of the full budget each to test."] + stopped_runs_line(rows)
    groups = f"**{ranking.groups} group{'s' if ranking.groups != 1 else ''}**"
    tests = (f"pairwise Welch t-tests over seeds, Holm-corrected over all {len(ranking.pairs)} pairs, "
             f"α = {ranking.alpha}")
    first = (f"*rank*: 1 + the number of recipes whose {label} is significantly higher ({tests}); recipes no test "
             f"separates share a rank. These figures separate {groups}." if ranks else
             f"The same tests on {label} ({tests}) separate {groups}; they rank nothing here.")
    lines = ["", first, *stopped_runs_line(rows), "", f"<details><summary>Pairwise tests on the {label}</summary>", "",
             "| a | b | t | df | p | Holm p | |", "|---|---|---:|---:|---:|---:|---|"]
    for (a, b), (test, adjusted) in sorted(ranking.pairs.items(), key=lambda item: item[1][1]):
        verdict = ("a > b" if test.t > 0 else "b > a") if adjusted < ranking.alpha else "tied"
        lines.append(f"| {a} | {b} | {test.t:.2f} | {test.df:.1f} | {test.p:.4f} | {adjusted:.4f} | {verdict} |")
    return lines + ["", "</details>"]


def evidence_lines(rows: list, columns: list, test_sizes: dict[str, int]) -> list[str]:
    """How far the suite's rows are from separating: seeds each would need against the best, which tasks make
    the seed spread and how much of it the test's size makes (seed_power.py; `test_sizes`: problems per task).
    Nothing without suite columns."""
    if not columns:
        return []
    named = {column.data_source: [(row.recipe, stats.values) for row in rows if (stats := row.after(column))]
             for column in columns}
    per_task = {task: [values for _, values in runs] for task, runs in named.items()}
    suite = suite_samples(rows, columns)
    return (separation_lines(suite, SUITE_MEAN) + spread_lines(per_task, test_sizes) + widest_task_runs_lines(named)
            + suite_test_set_line(suite, per_task, test_sizes, SUITE_MEAN))
