"""What more evidence would take: the seeds that would separate a recipe from the best, and the tasks that make
the seed spread.

A table whose tests separate no recipes says only that the measured gaps are within what its seeds resolve. Two
figures say how far from a ranking it is:

- *Seeds to separate a recipe from the best*: the least n (seeds for each of the two recipes) at which Welch's
  test of the two, with their measured means and stds held fixed, gives p < α/m, m the pairs the table corrects
  for (ranking.py). Below α/m a pair differs under Holm's correction whatever the other pairs' p-values are, so
  this n suffices. It plans, it does not promise: new seeds move the means and stds too.
- *Each task's seed spread*: the pooled within-recipe variance of its accuracy, Σ (n_r − 1) s_r² / Σ (n_r − 1)
  over the recipes r, and its share of the sum over tasks. The suite mean's variance over seeds is that sum
  over T² plus the tasks' covariances, so a task with a large share is the one that keeps rows from separating.
- *How much of that spread the test set's size makes*: a policy right on a share p of a task's problems scores
  on a test of n of them with variance p(1 − p)/n (binomial), so two seeds' policies that are equally good still
  score apart by that much. Its mean over the runs, against the pooled seed variance, bounds the part a larger
  test set would remove (at most: seeds that solve the same problems differ less); n times more problems cut that
  part n-fold at no training cost.
"""

from __future__ import annotations

import math
import statistics

from core.leaderboard.ranking import ALPHA, t_two_sided_p

MOST_SEEDS = 1000  # beyond this, "more than": a gap that small is a tie for any budget worth running


def seeds_to_separate(a: tuple[float, ...], b: tuple[float, ...], comparisons: int, alpha: float = ALPHA,
                      most: int = MOST_SEEDS) -> int | None:
    """The least n ≥ 2 at which Welch's test of two samples of n seeds, with a's and b's mean and std, reaches
    p < alpha / comparisons; None if the means are equal or n would exceed `most`."""
    difference = statistics.fmean(a) - statistics.fmean(b)
    if difference == 0:
        return None
    var_a, var_b = statistics.variance(a), statistics.variance(b)
    for n in range(2, most + 1):
        va, vb = var_a / n, var_b / n
        if va + vb == 0:
            return n
        t = difference / math.sqrt(va + vb)
        df = (va + vb) ** 2 / ((va ** 2 + vb ** 2) / (n - 1))
        if t_two_sided_p(t, df) < alpha / comparisons:
            return n
    return None


def pooled_seed_variance(samples: list[tuple[float, ...]]) -> float | None:
    """Σ (n_r − 1) s_r² / Σ (n_r − 1) over the samples with two values or more; None without any."""
    tested = [values for values in samples if len(values) >= 2]
    degrees = sum(len(values) - 1 for values in tested)
    if not degrees:
        return None
    return sum((len(values) - 1) * statistics.variance(values) for values in tested) / degrees


def separation_lines(samples: dict[str, tuple[float, ...]], label: str) -> list[str]:
    """Per recipe below the best (by mean): its gap and the seeds that would separate the two."""
    tested = {name: values for name, values in samples.items() if len(values) >= 2}
    if len(tested) < 2:
        return []
    comparisons = len(tested) * (len(tested) - 1) // 2
    ordered = sorted(tested, key=lambda name: statistics.fmean(tested[name]), reverse=True)
    best = ordered[0]
    lines = ["", f"Seeds that would separate each recipe from the best ({best}) on the {label}, if both kept their "
             f"measured mean and std: the least n seeds each at which Welch's p < α/m = {ALPHA}/{comparisons} "
             "(enough under Holm's correction whatever the other pairs show; seed_power.py).", "",
             f"| recipe | {label} | below {best} | seeds now | seeds to separate |", "|---|---:|---:|---:|---:|"]
    for name in ordered[1:]:
        needed = seeds_to_separate(tested[best], tested[name], comparisons)
        gap = statistics.fmean(tested[best]) - statistics.fmean(tested[name])
        lines.append(f"| {name} | {statistics.fmean(tested[name]):.3f} | {gap:.3f} | {len(tested[name])} | "
                     f"{needed if needed else f'> {MOST_SEEDS}'} |")
    return lines


def test_set_variance(samples: list[tuple[float, ...]], problems: int) -> float:
    """The mean over the runs of p(1 − p)/problems: what a run's accuracy p varies by from its test's size."""
    scores = [score for values in samples for score in values]
    return statistics.fmean(score * (1 - score) for score in scores) / problems


def task_variances(per_task: dict[str, list[tuple[float, ...]]]) -> dict[str, float]:
    """Each task's pooled within-recipe seed variance, where its rows have seeds enough for one."""
    return {task: var for task, samples in per_task.items() if (var := pooled_seed_variance(samples)) is not None}


def spread_lines(per_task: dict[str, list[tuple[float, ...]]], test_sizes: dict[str, int]) -> list[str]:
    """Per task: the pooled seed std of its accuracy, its share of the tasks' summed seed variance, and the most of
    its seed variance its test's size (`test_sizes`: problems per task) can explain."""
    variances = task_variances(per_task)
    total = sum(variances.values())
    if not variances or total == 0:
        return []
    lines = ["", "Which tasks make the seed spread: each task's pooled within-recipe seed std, its share of the "
             "tasks' summed seed variance, and how much of its seed variance the test's size alone could make "
             "(at most: the runs' mean p(1 − p)/n over its n test problems; seed_power.py).", "",
             "| task | test problems | pooled seed std | share | from the test's size |", "|---|---:|---:|---:|---:|"]
    for task, var in sorted(variances.items(), key=lambda item: item[1], reverse=True):
        problems = test_sizes.get(task)
        part = (f"≤ {min(1.0, test_set_variance(per_task[task], problems) / var):.0%}" if problems and var
                else "—")
        lines.append(f"| {task} | {problems or '—'} | {math.sqrt(var):.3f} | {var / total:.0%} | {part} |")
    return lines


def widest_task_runs_lines(named: dict[str, list[tuple[str, tuple[float, ...]]]]) -> list[str]:
    """The runs of the task with the largest seed variance (`named`: task -> (recipe, its runs' values) per row),
    each recipe's lowest first: whether its spread is a continuum or runs of two kinds."""
    variances = task_variances({task: [values for _, values in rows] for task, rows in named.items()})
    if not variances or not max(variances.values()):
        return []
    task = max(variances, key=variances.get)
    runs = "; ".join(f"{recipe} {' '.join(f'{value:.2f}' for value in sorted(values))}" for recipe, values in named[task])
    return ["", f"{task}, the task of the largest share, run by run (each recipe's runs, lowest first): {runs}."]


def suite_test_set_line(suite: dict[str, tuple[float, ...]], per_task: dict[str, list[tuple[float, ...]]],
                        test_sizes: dict[str, int], label: str) -> list[str]:
    """The most of the suite mean's pooled seed variance the tasks' test sizes can explain: Σ_t p_t(1 − p_t)/n_t
    over T², the tasks' sampling errors being independent (different problems)."""
    seed_var = pooled_seed_variance(list(suite.values()))
    if not seed_var or not per_task or any(not test_sizes.get(task) for task in per_task):
        return []
    part = sum(test_set_variance(samples, test_sizes[task]) for task, samples in per_task.items()) / len(per_task) ** 2
    return ["", f"Of the {label}'s pooled seed variance ({math.sqrt(seed_var):.3f} std), up to "
            f"{min(1.0, part / seed_var):.0%} is what its test's size makes ({math.sqrt(part):.3f} std): a test "
            "k times larger cuts that part k-fold, without another seed."]
