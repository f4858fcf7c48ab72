"""Model-based rewards end to end on the embedded tiny model (CPU): a preference set from the tiny policy's own
arithmetic rollouts, a reward model trained on it by `recipezoo rm`, GRPO with that reward model as a mixed
source; and the LLM judge, with a fake engine of planted texts (said so where it is used) and with the real HF
engine. Bad reward input to `recipezoo train` ends in one line before any engine starts, with no MLflow run."""

import json

import mlflow
import pytest
import torch

from core.cli import main as cli_main
from core.config import load_config
from core.data.rows import read_rows
from core.data.sources import resolve_data_files
from core.reward.gsm8k import compute_score
from core.trainer.judge_worker import JudgeWorker
from tests.planted_judge import PlantedJudge


def metrics_of(uri: str, experiment: str = "recipezoo") -> dict:
    client = mlflow.MlflowClient(tracking_uri=uri)
    [run] = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    return {key: [m.value for m in client.get_metric_history(run.info.run_id, key)] for key in run.data.metrics}


def test_policy_pairs_train_a_reward_model_that_grpo_mixes_in(tmp_path):
    [train_file] = resolve_data_files("embedded://arithmetic", "train", tmp_path / "data")
    pairs = tmp_path / "pairs.parquet"
    assert cli_main(["preference-pairs", "--model", "embedded://tiny-arith", "--data", train_file, "--n", "4",
                     "--temperature", "1.0", "--max-tokens", "24", "--max-samples", "120", "--batch-size", "120",
                     "--device", "cpu", "--out", str(pairs)]) == 0
    rows = read_rows(pairs)
    assert len(rows) >= 10
    for row in rows:  # graded by the rule scorer: right against wrong for the same prompt
        assert compute_score(row["chosen"], row["ground_truth"]) == 1.0
        assert compute_score(row["rejected"], row["ground_truth"]) == 0.0

    uri, rm_out = f"sqlite:///{tmp_path}/mlflow.db", tmp_path / "rm"
    assert cli_main(["rm", "--model", "embedded://tiny-arith", "--train-files", str(pairs), "--out", str(rm_out),
                     "--epochs", "1", "--batch-size", "8", "--lr", "1e-3", "--val-fraction", "0.25",
                     "--mlflow-uri", uri]) == 0
    rm_metrics = metrics_of(uri, "recipezoo-rm")
    assert len(rm_metrics["rm/val/acc"]) == 2 and rm_metrics["rm/val/acc"][0] == 0.0  # a zero head ties every pair
    assert rm_metrics["rm/loss"][0] == pytest.approx(0.6931, abs=1e-3)  # log 2: every score 0 at the start
    config = json.loads((rm_out / "model" / "config.json").read_text())
    assert config["architectures"] == ["Qwen3ForSequenceClassification"] and len(config["id2label"]) == 1

    train_uri = f"sqlite:///{tmp_path}/train.db"
    assert cli_main(["train", "--recipe", "grpo", "model.path=embedded://tiny-arith", "trainer.total_steps=2",
                     "trainer.test_freq=0", "data.train_batch_size=4", "actor.ppo_mini_batch_size=4", "rollout.n=2",
                     f"reward.model.path={rm_out / 'model'}", "reward.weights.model=0.5",
                     f"tracking.uri={train_uri}", f"trainer.output_dir={tmp_path}/out"]) == 0
    metrics = metrics_of(train_uri)
    for step in range(2):  # token_level_scores hold rule + 0.5 · model, per row on its last token
        mixed = metrics["reward/rule/mean"][step] + 0.5 * metrics["reward/model/mean"][step]
        assert metrics["critic/score/mean"][step] == pytest.approx(mixed, abs=1e-5)
    assert any(value != 0.0 for value in metrics["reward/model/mean"])


def test_the_judge_scores_planted_verdicts_and_counts_the_unparseable(caplog):
    from core.models.tiny import build_tiny_tokenizer

    tokenizer = build_tiny_tokenizer()
    config = load_config("grpo", ["reward.judge.enable=true", "reward.weights.judge=1.0", "reward.judge.batch_size=2"])
    engine = PlantedJudge(tokenizer, ["Looks right. Score: 8", "no idea", "Score: 3", "Score: 10"])
    judge = JudgeWorker(config, torch.device("cpu"), tokenizer, engine=engine, tokenizer=tokenizer)
    scores, metrics = judge.score(["#### 5", "#### 6", "#### 7", "#### 8"],
                                  [[{"role": "user", "content": f"What is {a}+1?"}] for a in range(4, 8)],
                                  ["5", "5", None, "7"])
    assert scores.tolist() == pytest.approx([0.8, 0.0, 0.3, 1.0])
    assert metrics == {"reward/judge/parse_failures": 1.0, "reward/judge/parse_failure_frac": 0.25}
    assert "no idea" in caplog.text and "parse_failures" in caplog.text
    assert [len(call) for call in engine.calls] == [2, 2]  # batched by reward.judge.batch_size
    first = engine.calls[0][0]
    assert "Question: What is 4+1?" in first and "Response: #### 5" in first and "Reference answer: 5" in first
    assert "Reference answer: (none)" in engine.calls[1][0]


def test_a_real_hf_judge_that_ignores_the_format_is_counted_not_a_silent_zero(fast_overrides, tmp_path):
    uri = f"sqlite:///{tmp_path}/judge.db"
    overrides = [o for o in fast_overrides if not o.startswith("tracking.backends")]
    assert cli_main(["train", "--recipe", "grpo", *overrides, "reward.judge.enable=true", "reward.weights.judge=1.0",
                     "reward.judge.max_new_tokens=8", f"tracking.uri={uri}"]) == 0
    metrics = metrics_of(uri)
    # The random tiny model writes no "Score: N": every one of the 8 responses is a counted parse failure.
    assert metrics["reward/judge/parse_failures"] == [8.0]
    assert metrics["reward/judge/mean"] == [0.0]


@pytest.mark.parametrize("extra, message", [
    (["reward.judge.enable=true", "reward.weights.judge=1.0", "reward.judge.template='Grade: {question}'"],
     "reward.judge.template has no {response} placeholder"),
    (["reward.weights.model=1.0"], "reward.weights.model=1 but reward.model.path is off"),
    (["reward.judge.enable=true"], "reward.judge.enable is set but reward.weights.judge=0"),
])
def test_bad_reward_config_is_one_line_and_no_mlflow_run(fast_overrides, tmp_path, capsys, extra, message):
    overrides = [o for o in fast_overrides if not o.startswith("tracking.backends")]
    assert cli_main(["train", "--recipe", "grpo", *overrides, *extra, f"tracking.uri=sqlite:///{tmp_path}/x.db"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
    assert not (tmp_path / "x.db").exists()


def test_a_reward_model_whose_head_is_not_scalar_fails_before_any_engine(fast_overrides, tmp_path, capsys):
    bad = tmp_path / "three-labels"
    bad.mkdir()
    (bad / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForSequenceClassification"],
                                                 "id2label": {"0": "a", "1": "b", "2": "c"}}))
    (bad / "model.safetensors").write_bytes(b"")
    (bad / "tokenizer.json").write_text("{}")
    overrides = [o for o in fast_overrides if not o.startswith("tracking.backends")]
    assert cli_main(["train", "--recipe", "grpo", *overrides, f"reward.model.path={bad}", "reward.weights.model=1.0",
                     f"tracking.uri=sqlite:///{tmp_path}/x.db"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "its head has 3 outputs" in err, err
    assert not (tmp_path / "x.db").exists()
