"""pass@k, the shared summary, and `recipezoo generate` / `recipezoo eval` end to end."""

import json
import os
from pathlib import Path

import mlflow
import pytest

from core.cli import main as cli_main
from core.data.preprocess import preprocess
from core.data.rows import read_rows, write_rows
from core.eval.evaluate import evaluate, format_report, prompt_fingerprints
from core.eval.passk import ks_for, pass_at_k
from core.eval.summary import PromptResult, summarize
from core.reward.manager import RewardManager

SHARED_DATA = Path(os.environ.get("RECIPEZOO_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
needs_shared = pytest.mark.skipif(not SHARED_DATA.is_dir(), reason=f"shared benchmark files not at {SHARED_DATA}")


@pytest.mark.parametrize("n, c, k, expected", [
    (4, 1, 1, 0.25),          # pass@1 is the fraction correct
    (4, 1, 2, 1 - 3 / 6),     # 1 - C(3,2)/C(4,2)
    (5, 2, 3, 1 - 1 / 10),    # 1 - C(3,3)/C(5,3)
    (4, 0, 4, 0.0),
    (4, 4, 1, 1.0),
    (4, 3, 2, 1.0),           # fewer than k wrong samples: some draw of k always has a right one
])
def test_pass_at_k_matches_the_binomial_formula(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected)


def test_pass_at_k_rejects_impossible_counts():
    with pytest.raises(ValueError, match="0 <= c <= n"):
        pass_at_k(4, 5, 1)


def test_reported_ks_are_powers_of_two_and_n():
    assert ks_for(1) == [1] and ks_for(4) == [1, 2, 4] and ks_for(6) == [1, 2, 4, 6]


def test_summary_by_data_source_by_hand():
    results = [PromptResult("a", [1, 0], [1, 0]), PromptResult("a", [0, 0], [0, 0.5]),
               PromptResult("b", [1, 1], [1, 1])]
    summary = summarize(results)
    assert summary["a"]["mean@2"] == 0.25 and summary["a"]["pass@1"] == 0.25
    assert summary["a"]["pass@2"] == 0.5  # prompt 1: 1 - C(1,2)/C(2,2) = 1; prompt 2: 0
    assert summary["a"]["score"] == pytest.approx(1.5 / 4)
    assert summary["b"]["pass@2"] == 1.0
    assert summary["all"]["mean@2"] == pytest.approx(3 / 6) and summary["all"]["num_prompts"] == 3


def with_responses(rows, make_response):
    return [{**row, "responses": [make_response(row)]} for row in rows]


@needs_shared
@pytest.mark.parametrize("benchmark, gold", [
    ("gsm8k", lambda row: row["extra_info"]["answer"]),      # the reference solution ends in `#### N`
    ("math500", lambda row: row["extra_info"]["solution"]),  # the reference solution has \boxed{...}
    ("aime24", lambda row: f"So the answer is $\\boxed{{{row['extra_info']['answer']}}}$."),
])
def test_reference_solutions_score_full_marks_and_wrong_answers_none(benchmark, gold, tmp_path):
    source = {"gsm8k": "gsm8k/test.jsonl", "math500": "math500/test.jsonl", "aime24": "aime24/test.jsonl"}[benchmark]
    [(path, _)] = preprocess(benchmark, tmp_path, local=SHARED_DATA / source, split="test")
    rows = read_rows(path)[:120]
    write_rows(with_responses(rows, gold), tmp_path / "gold.parquet")
    write_rows(with_responses(rows, lambda row: "I think it is \\boxed{-31337}. #### -31337"), tmp_path / "wrong.parquet")
    with RewardManager(tokenizer=None) as manager:
        right = evaluate([str(tmp_path / "gold.parquet")], manager, {})
        wrong = evaluate([str(tmp_path / "wrong.parquet")], manager, {})
    [(source_name, figures)] = right["results"].items()
    assert figures["pass@1"] == 1.0 and figures["num_prompts"] == len(rows)
    assert wrong["results"][source_name]["pass@1"] == 0.0 and right["reward_errors"] == 0


def test_the_report_says_which_answer_formats_the_responses_hold(tmp_path):
    rows = [{"data_source": "openai/gsm8k", "reward_model": {"ground_truth": "3"}, "prompt": "p",
             "responses": responses} for responses in (["so \\boxed{3}", "#### 3"], ["three", "\\boxed{4} or 5"])]
    write_rows(rows, tmp_path / "responses.parquet")
    with RewardManager(tokenizer=None) as manager:
        report = evaluate([str(tmp_path / "responses.parquet")], manager, {})
    # 4 responses: one `####`, two boxes, three with a digit in their tail.
    assert report["answer_formats"] == {"openai/gsm8k": {"####": 0.25, "\\boxed{}": 0.5, "a last number": 0.75}}
    assert "openai/gsm8k responses containing: 25.0% ####, 50.0% \\boxed{}, 75.0% a last number" in format_report(report)
    assert "at_length_limit" not in report  # no generation settings in these rows: nothing to measure against


def test_the_report_says_which_share_of_responses_the_token_limit_cut(tmp_path):
    rows = [{"data_source": "openai/gsm8k", "reward_model": {"ground_truth": "3"}, "prompt": "p",
             "responses": ["\\boxed{3}", "3 3 3 3"], "response_lengths": lengths, "generation": {"max_tokens": 4}}
            for lengths in ([2, 4], [4, 1])]  # 2 of the 4 responses used all 4 tokens
    write_rows(rows, tmp_path / "responses.parquet")
    with RewardManager(tokenizer=None) as manager:
        report = evaluate([str(tmp_path / "responses.parquet")], manager, {})
    assert report["at_length_limit"] == {"openai/gsm8k": 0.5}
    assert ("openai/gsm8k responses containing: 0.0% ####, 50.0% \\boxed{}, 100.0% a last number; 50.0% stopped "
            "at the token limit") in format_report(report)


def arithmetic_rows():
    return [{"data_source": "arithmetic", "prompt": [{"role": "user", "content": f"{a} + {b} = ?"}],
             "ability": "math", "reward_model": {"style": "rule", "ground_truth": str(a + b)},
             "extra_info": {"index": i}} for i, (a, b) in enumerate([(1, 2), (30, 4), (7, 7)])]


def test_generate_then_eval_writes_json_table_and_mlflow_run(random_model_dir, tmp_path):
    data = write_rows(arithmetic_rows(), tmp_path / "prompts.parquet")
    responses = tmp_path / "responses.parquet"
    assert cli_main(["generate", "--model", random_model_dir, "--data", str(data), "--out", str(responses),
                     "--n", "4", "--temperature", "1.0", "--max-tokens", "5", "--batch-size", "2"]) == 0
    rows = read_rows(responses)
    assert len(rows) == 3 and all(len(row["responses"]) == 4 for row in rows)
    assert rows[0]["generation"]["n"] == 4 and rows[1]["reward_model"]["ground_truth"] == "34"

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    out = tmp_path / "eval" / "metrics.json"
    assert cli_main(["eval", "--responses", str(responses), "--out", str(out), "--mlflow-uri", uri,
                     "--reward-manager", "naive"]) == 0
    report = json.loads(out.read_text())
    assert set(report["results"]["arithmetic"]) >= {"mean@4", "pass@1", "pass@2", "pass@4"}
    assert report["protocol"]["generation"]["temperature"] == 1.0
    # the generated rows keep their prompts: the fingerprint is the prompt file's own
    assert report["prompts_sha256"] == prompt_fingerprints(read_rows(data)) and \
        len(report["prompts_sha256"]["arithmetic"]) == 64
    assert "| arithmetic | 3 |" in out.with_suffix(".md").read_text()
    [run] = mlflow.MlflowClient(tracking_uri=uri).search_runs(
        [mlflow.MlflowClient(tracking_uri=uri).get_experiment_by_name("recipezoo-eval").experiment_id])
    assert "eval/arithmetic/pass_at_4" in run.data.metrics
    # --max-tokens 5 from a random model: most responses run to the limit, and the run logs their share.
    assert 0 < run.data.metrics["eval/arithmetic/at_length_limit"] <= 1


def test_eval_names_a_file_without_ground_truth(tmp_path, capsys):
    rows = [{**row, "responses": ["#### 3"]} for row in arithmetic_rows()]
    del rows[1]["reward_model"]["ground_truth"]
    write_rows(rows, tmp_path / "bad.parquet")
    assert cli_main(["eval", "--responses", str(tmp_path / "bad.parquet"), "--no-mlflow",
                     "--out", str(tmp_path / "m.json")]) == 1
    err = capsys.readouterr().err
    assert "bad.parquet: row 1 has no 'reward_model.ground_truth'" in err


def test_eval_refuses_when_most_responses_fail_to_score(tmp_path, capsys):
    """A scorer that cannot run (here it raises; on a GPU host, a verifier whose import failed) would score
    every response 0, which reads as an accuracy: the command stops before writing the json or an MLflow run."""
    scorer = tmp_path / "broken.py"
    scorer.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                      "    import no_such_module  # noqa: F401\n")
    write_rows([{**row, "responses": ["#### 3"]} for row in arithmetic_rows()], tmp_path / "responses.parquet")
    out, uri = tmp_path / "m.json", f"sqlite:///{tmp_path}/mlflow.db"
    argv = ["eval", "--responses", str(tmp_path / "responses.parquet"), "--out", str(out), "--mlflow-uri", uri,
            "--reward-manager", "naive", "--custom-function", f"{scorer}:compute_score"]
    assert cli_main(argv) == 1
    err = capsys.readouterr().err
    assert "broken.py:compute_score failed on 3 of 3 rows" in err and "No module named 'no_such_module'" in err
    assert "--max-error-frac=0.5" in err and not out.exists() and not (tmp_path / "mlflow.db").exists()
    assert cli_main([*argv, "--max-error-frac", "1"]) == 0  # the user's choice: every row scored 0, reported
    assert json.loads(out.read_text())["reward_errors"] == 3
    assert cli_main([*argv, "--max-error-frac", "2"]) == 1
    assert "--max-error-frac=2: expected a share between 0 and 1" in capsys.readouterr().err


def test_generate_without_a_model_says_which_flag_is_missing(tmp_path, capsys):
    assert cli_main(["generate", "--data", "x.parquet", "--out", str(tmp_path / "o.parquet")]) == 1
    assert "--model required" in capsys.readouterr().err


def test_validation_with_several_samples_reports_pass_at_k(fast_overrides):
    from core.config import load_config
    from recipes.grpo.trainer import GRPOTrainer

    config = load_config("grpo", fast_overrides + ["trainer.test_freq=1", "data.val_max_samples=6",
                                                   "rollout.val_n=4", "rollout.val_temperature=1.0"])
    metrics = GRPOTrainer(config).fit()
    assert {"val/arithmetic/acc", "val/arithmetic/pass@2", "val/arithmetic/pass@4", "val/acc"} <= set(metrics)
    assert metrics["val/arithmetic/pass@4"] >= metrics["val/arithmetic/pass@1"] == metrics["val/arithmetic/acc"]
