"""seed_power: the seeds that would separate two recipes, and each task's share of the seed spread, checked
against figures worked by hand."""

import pytest

from core.leaderboard.seed_power import (
    pooled_seed_variance,
    seeds_to_separate,
    separation_lines,
    spread_lines,
    suite_test_set_line,
    widest_task_runs_lines,
)

# Means 0.42 and 0.32, each with sample variance 0.0008. With n seeds each, the difference's standard error is
# √(2 · 0.0008 / n) = 0.04 / √n, so t = 2.5 √n, and Welch's df = 2 (n − 1).
HIGH, LOW = (0.40, 0.44), (0.30, 0.34)


def test_two_seeds_fall_short_and_three_reach_five_percent():
    # n = 2: t = 3.536 with df = 2, where p = 1 − t / √(t² + 2) = 1 − 3.536 / 3.808 = 0.0715 > 0.05.
    # n = 3: t = 4.330 with df = 4, above the 5% two-sided critical value 2.776.
    assert seeds_to_separate(HIGH, LOW, comparisons=1) == 3


def test_more_comparisons_ask_for_more_seeds():
    # α/m = 0.005: n = 3 gives t = 4.330 with df = 4, below the 0.5% critical value 4.604; n = 4 gives t = 5.0 with
    # df = 6, above its 4.317.
    assert seeds_to_separate(HIGH, LOW, comparisons=10) == 4


def test_equal_means_never_separate_and_constant_unequal_ones_at_once():
    assert seeds_to_separate(HIGH, (0.44, 0.40), comparisons=1) is None
    assert seeds_to_separate((0.5, 0.5), (0.4, 0.4), comparisons=100) == 2


def test_a_gap_too_small_for_the_cap_says_so():
    assert seeds_to_separate((0.40, 0.50), (0.39, 0.51), comparisons=105, most=50) is None


def test_pooled_variance_weighs_each_recipe_by_its_degrees_of_freedom():
    # variances 2 (one df) and 4 (two df): (1·2 + 2·4) / 3; a single seed adds nothing.
    assert pooled_seed_variance([(1.0, 3.0), (2.0, 4.0, 6.0), (9.0,)]) == pytest.approx(10 / 3)
    assert pooled_seed_variance([(1.0,)]) is None


def test_the_tables_name_the_best_and_the_task_that_spreads_most():
    lines = separation_lines({"low": LOW, "high": HIGH, "alone": (0.9,)}, "suite mean")
    assert lines[-1] == "| low | 0.320 | 0.100 | 2 | 3 |"
    assert "from the best (high)" in lines[1] and "0.05/1 " in lines[1]
    spread = spread_lines({"steady": [(0.5, 0.5), (0.2, 0.2)], "noisy": [(0.1, 0.3)], "calm": [(0.40, 0.44)]},
                          {"noisy": 50, "calm": 100})
    # noisy: variance 0.02, calm: 0.0008, steady: 0; shares of 0.0208. From the test's size: noisy
    # mean(0.1·0.9, 0.3·0.7)/50 = 0.003 of 0.02; calm mean(0.24, 0.2464)/100 = 0.00243, more than its 0.0008.
    assert spread[-3:] == ["| noisy | 50 | 0.141 | 96% | ≤ 15% |", "| calm | 100 | 0.028 | 4% | ≤ 100% |",
                           "| steady | — | 0.000 | 0% | — |"]


def test_the_suite_line_bounds_what_the_test_sets_size_makes_of_the_seed_spread():
    # pooled seed variance of the suite mean: (0.005 + 0.005) / 2; from the tests' sizes, two tasks of 100:
    # (0.5·0.5 / 100 + mean(0.09, 0.21) / 100) / 2² = (0.0025 + 0.0015) / 4 = 0.001, a fifth of it.
    suite = {"a": (0.2, 0.3), "b": (0.1, 0.2)}
    per_task = {"t1": [(0.5, 0.5)], "t2": [(0.1, 0.3)]}
    (line,) = suite_test_set_line(suite, per_task, {"t1": 100, "t2": 100}, "suite mean")[1:]
    assert "(0.071 std), up to 20% is what its test's size makes (0.032 std)" in line
    assert suite_test_set_line(suite, per_task, {"t1": 100}, "suite mean") == []  # a task of unknown size


def test_the_task_of_the_widest_spread_is_shown_run_by_run():
    # noisy: variance 0.02 (one recipe, one df); calm: 0.0008; steady: 0. noisy's runs, each recipe's lowest first.
    named = {"steady": [("a", (0.5, 0.5)), ("b", (0.2, 0.2))], "noisy": [("a", (0.3, 0.1)), ("b", (0.7,))],
             "calm": [("a", (0.44, 0.40))]}
    assert widest_task_runs_lines(named) == [
        "", "noisy, the task of the largest share, run by run (each recipe's runs, lowest first): a 0.10 0.30; b 0.70."]
    assert widest_task_runs_lines({"steady": [("a", (0.5, 0.5))]}) == []  # no spread: nothing to show
