"""Significance ranks: Welch's t-test and Holm's correction by hand (and against scipy where installed); the
reasoning-gym section's suite mean and ranks; refusing rows from another model file or budget; its curve's step 0
from the pretrained model's evaluation."""

from __future__ import annotations

import copy
import math

import pytest

from core.leaderboard.before_after import build_before_after, render_before_after
from core.leaderboard.export import LeaderboardError
from core.leaderboard.ranking import holm_adjust, rank_by_significance, regularized_beta, welch_test
from tests.test_gsm8k_leaderboard import train_run

SHA = "a" * 64


def test_welch_by_hand():
    # a = (0, 2), b = (3, 5): means 1 and 4, variances 2 and 2 -> se = √(2/2 + 2/2) = √2, t = −3/√2;
    # df = (1 + 1)² / (1²/1 + 1²/1) = 2, and for 2 degrees of freedom P(|T| ≥ |t|) = 1 − |t| / √(2 + t²).
    test = welch_test((0.0, 2.0), (3.0, 5.0))
    t = -3 / math.sqrt(2)
    assert test.t == pytest.approx(t) and test.df == pytest.approx(2.0)
    assert test.p == pytest.approx(1 - abs(t) / math.sqrt(2 + t * t), rel=1e-9)
    assert welch_test((1.0, 1.0), (1.0, 1.0)).p == 1.0 and welch_test((1.0, 1.0), (2.0, 2.0)).p == 0.0
    assert regularized_beta(1.0, 1.0, 0.3) == pytest.approx(0.3)  # I_x(1, 1) = x


def test_welch_matches_scipy():
    scipy_stats = pytest.importorskip("scipy.stats")
    for a, b in [((0.1, 0.2, 0.15), (0.3, 0.35, 0.5)), ((0.5, 0.52, 0.49, 0.51), (0.4, 0.6, 0.55)),
                 ((0.81, 0.83, 0.9), (0.82, 0.84, 0.86))]:
        ours, theirs = welch_test(a, b), scipy_stats.ttest_ind(a, b, equal_var=False)
        assert ours.t == pytest.approx(theirs.statistic) and ours.p == pytest.approx(theirs.pvalue, rel=1e-7)


def test_holm_by_hand():
    # sorted p: 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1 = 0.02, 0.03, 0.06, 0.04 -> non-decreasing 0.02, 0.03, 0.06, 0.06
    assert holm_adjust([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])


def test_ties_share_a_rank():
    ranking = rank_by_significance({"x": (0.90, 0.91, 0.92), "y": (0.50, 0.52, 0.51), "z": (0.10, 0.11, 0.12),
                                    "noisy": (0.5, 0.9, 0.1), "one": (0.3,)})
    assert ranking.ranks == {"x": 1, "y": 2, "z": 3, "noisy": 1, "one": 0}
    assert ranking.groups == 3 and ranking.better["z"] == ["x", "y"]
    alone = rank_by_significance({"x": (0.9, 0.91), "one": (0.3,)})  # nothing to test x against
    assert alone.ranks == {"x": 0, "one": 0} and alone.groups == 0 and not alone.pairs


# ---- the reasoning-gym section ---------------------------------------------------------------------------

def rg_eval(run_id, stage, values, recipe=None, train_run_id=None):
    protocol = {"generation.n": "1", "generation.temperature": "0.0", "generation.top_p": "1.0", "generation.top_k": "0",
                "generation.max_tokens": "256", "generation.max_prompt_length": "1024", "generation.max_samples": "None",
                "generation.rollout": "vllm", "grader.gsm8k_method": "strict", "grader.custom_function": "None",
                "files": '["reasoning_gym/test.parquet"]'}
    results = {f"reasoning_gym/{task}": {"num_prompts": 100.0, "num_samples": 100.0, "mean@1": value, "score": value}
               for task, value in values.items()}
    return {"run_id": run_id, "run_name": run_id, "stage": stage, "model": "m", "recipe": recipe,
            "train_run_id": train_run_id, "evaluated": "m", "seed": 0, "protocol": protocol, "results": results,
            "model_sha256": SHA}


def rg_run(recipe, seed):
    run = train_run(recipe, seed, tags={"model_sha256": SHA}, **{"data.val_files": "reasoning_gym/test.parquet"})
    run["model"] = "m"
    run["final"] = {"val/reasoning_gym/syllogism/acc": 0.5}
    run["history"]["val/reasoning_gym/syllogism/acc"] = run["history"].pop("val/openai/gsm8k/acc")
    return run


@pytest.fixture
def suite():
    figures = {"grpo": [(0.6, 0.8), (0.62, 0.82), (0.61, 0.84)], "rloo": [(0.4, 0.5), (0.42, 0.5), (0.41, 0.52)],
               "ppo": [(0.2, 0.3), (0.21, 0.31), (0.2, 0.32)]}
    runs = [rg_run(recipe, seed) for recipe in figures for seed in range(3)]
    evals = [rg_eval("before", "before", {"products": 0.5, "syllogism": 0.2})]
    evals += [rg_eval(f"{recipe}-e{seed}", "after", {"products": a, "syllogism": b}, recipe, f"{recipe}-{seed}")
              for recipe, values in figures.items() for seed, (a, b) in enumerate(values)]
    return runs, evals


def test_suite_mean_and_ranks(suite):
    section = build_before_after(*suite)
    assert [row.recipe for row in section.rows] == ["grpo", "rloo", "ppo"]
    markdown = "\n".join(render_before_after(section))
    assert "## reasoning-gym suite of 2 tasks (products, syllogism), pretrained model `m`" in markdown
    assert "| recipe | seeds | suite mean | rank | reasoning_gym/products mean@1 (verifier) |" in markdown
    # grpo: per-seed suite means 0.70, 0.72, 0.725 -> 0.715; the model before: (0.5 + 0.2) / 2 = 0.35
    assert "| grpo | 3 | 0.350 → 0.715 ± 0.013 [0.682, 0.748] ↑ | 1 |" in markdown
    assert "| ppo | 3 | 0.350 → 0.257 ± 0.006 [0.242, 0.271] ↓ | 3 |" in markdown  # 0.25, 0.26, 0.26
    assert "separate **3 groups**" in markdown and "| 25 | 1M | 10.0 | 9.5 | reasoning-gym verifiers |" in markdown


def test_runs_their_time_budget_stopped_are_left_out_of_the_ranks(suite):
    """A stopped run trained fewer steps: its row shows it, the tests do not count it. rloo with one of three
    stopped keeps two full runs (0.45, 0.46), tested against ppo's three; grpo with two stopped is unranked (its
    mean still shows all three), so rloo ranks first and the two rows tested separate two groups. With every run
    stopped no test is made at all."""
    runs, evals = copy.deepcopy(suite)
    stopped = {"stopped_by_budget": "time: after step 20 of 25"}
    for run in runs:
        if (run["recipe"], run["seed"]) in {("grpo", 0), ("grpo", 1), ("rloo", 2)}:
            run["tags"].update(stopped)
    markdown = "\n".join(render_before_after(build_before_after(runs, evals)))
    assert "| grpo | 3 | 0.350 → 0.715 ± 0.013 [0.682, 0.748] ↑ | — |" in markdown
    assert "| rloo | 3 | 0.350 → 0.458 ± 0.008 [0.439, 0.477] ↑ | 1 |" in markdown
    assert "| ppo | 3 | 0.350 → 0.257 ± 0.006 [0.242, 0.271] ↓ | 2 |" in markdown
    assert "separate **2 groups**" in markdown and "Holm-corrected over all 1 pairs" in markdown
    assert "trained fewer steps than the budget (their time limit stopped them): grpo 2 of 3, rloo 1 of 3 runs" in markdown
    for run in runs:
        run["tags"].update(stopped)
    markdown = "\n".join(render_before_after(build_before_after(runs, evals)))
    assert "*rank*: none, as no two rows have two runs of the full budget each to test." in markdown
    assert "Pairwise tests" not in markdown


def test_rows_from_another_model_file_or_budget_are_refused(suite):
    runs, evals = copy.deepcopy(suite)
    runs[0]["tags"]["model_sha256"] = "b" * 64
    with pytest.raises(LeaderboardError, match="started from different model files .* grpo seed 0"):
        build_before_after(runs, evals)
    runs, evals = copy.deepcopy(suite)
    evals[0].pop("model_sha256")
    with pytest.raises(LeaderboardError, match="not recorded: the pretrained model's evaluation before"):
        build_before_after(runs, evals)
    runs, evals = copy.deepcopy(suite)
    runs[-1]["params"]["rollout.n"] = "16"
    with pytest.raises(LeaderboardError, match=r"different budgets, rollout.n = 16: ppo seed 2; 8: "):
        build_before_after(runs, evals)


def test_a_run_without_step_0_starts_its_curve_at_the_pretrained_evaluation(suite, tmp_path, monkeypatch):
    """Runs made with trainer.val_before_train=false: the suite curve's step 0 is the `before` evaluation's
    (0.5 + 0.2) / 2 = 0.35, each task's mean@1 its val/<task>/acc at step 0, where that evaluation measured what
    the runs validate (greedy, one response, their 256 new tokens, all 200 problems); a run keeps a step 0 of
    its own; runs that validate under another token limit get no step 0 from it."""
    from core.leaderboard import board

    runs, evals = copy.deepcopy(suite)
    for run in runs:
        run["params"].update({"data.max_response_length": "256", "rollout.val_n": "1",
                              "rollout.val_temperature": "0.0", "data.val_max_samples": "200"})
        run["history"]["val/reasoning_gym/products/acc"] = [[5, 0.6], [25, 0.8]]
        run["history"]["val/reasoning_gym/syllogism/acc"] = [[5, 0.4], [25, 0.6]]
    runs[0]["history"] = {key: [[0, 0.9], *points] for key, points in runs[0]["history"].items()}

    def suite_curves():
        plotted = {}
        monkeypatch.setattr(board, "plot_seed_curves", lambda series, panels, path, title: plotted.update(
            {label: [run["history"] for run in members] for label, members in series}) or path)
        board.write_leaderboard({"experiment": "x", "runs": runs, "evals": evals}, tmp_path)
        return {label: [history.get(board.SUITE_CURVE_KEY) for history in histories]
                for label, histories in plotted.items()}, plotted

    curves, plotted = suite_curves()
    assert curves["rloo (n=3)"] == [[[0, 0.35], [5, 0.5], [25, 0.7]]] * 3
    assert plotted["rloo (n=3)"][0]["val/reasoning_gym/products/acc"][0] == [0, 0.5]
    assert curves["grpo (n=3)"][0][0] == [0, 0.9]  # its own step 0
    for run in runs:
        run["params"]["data.max_response_length"] = "384"
    curves, _ = suite_curves()
    assert curves["rloo (n=3)"][0][0] == [5, 0.5]
