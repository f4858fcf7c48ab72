"""`recipezoo rm` stops and resumes as the RL and SFT trainers do (core/trainer/run.py), on the embedded tiny model
(CPU): a run stopped by a real SIGTERM after step 2 and resumed with `--resume=auto` ends with the weights and the
per-step losses of a straight run, bit for bit, in the same MLflow run; a truncated checkpoint is refused in one
line naming its file, before any model loads or MLflow run starts."""

import json
import os
import signal

import mlflow
import pytest
import torch
from safetensors.torch import load_file

import core.trainer.reward_model_training as rm_training
from core.cli import main as cli_main


@pytest.fixture
def pairs_file(tmp_path):
    """11 prompts: 3 held out (--val-fraction 0.25), 8 trained, 2 a step: 4 steps an epoch."""
    path = tmp_path / "pairs.jsonl"
    rows = [{"prompt": f"What is {a}+{a + 2}?", "chosen": f"#### {2 * a + 2}", "rejected": f"#### {2 * a + 5}"}
            for a in range(11)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def rm_args(pairs_file, out, uri, *extra):
    return ["rm", "--model", "embedded://tiny-arith", "--train-files", str(pairs_file), "--out", str(out),
            "--batch-size", "2", "--lr", "1e-3", "--val-fraction", "0.25", "--device", "cpu", "--mlflow-uri", uri,
            *extra]


def rm_runs(uri):
    client = mlflow.MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("recipezoo-rm")
    return client, [] if experiment is None else client.search_runs([experiment.experiment_id])


def history(uri, key):
    client, [run] = rm_runs(uri)
    return [(m.step, m.value) for m in sorted(client.get_metric_history(run.info.run_id, key), key=lambda m: m.step)]


def test_a_stopped_reward_model_run_resumes_bit_exact(pairs_file, tmp_path, monkeypatch, capsys):
    straight_uri, straight = f"sqlite:///{tmp_path}/straight.db", tmp_path / "straight"
    assert cli_main(rm_args(pairs_file, straight, straight_uri)) == 0

    real_step, steps = rm_training.train_step, []

    def step_then_sigterm_after_the_second(*args):
        metrics = real_step(*args)
        steps.append(1)
        if len(steps) == 2:  # as a scheduler's preemption sends it, in the middle of the epoch
            os.kill(os.getpid(), signal.SIGTERM)
        return metrics

    monkeypatch.setattr(rm_training, "train_step", step_then_sigterm_after_the_second)
    uri, out = f"sqlite:///{tmp_path}/resumed.db", tmp_path / "resumed"
    assert cli_main(rm_args(pairs_file, out, uri)) == 128 + signal.SIGTERM
    err = capsys.readouterr().err
    assert "after step 2 of 4" in err and "continue with --resume=auto" in err, err
    assert (out / "checkpoints" / "global_step_2" / "SHA256SUMS").is_file() and not (out / "model").exists()
    monkeypatch.setattr(rm_training, "train_step", real_step)

    assert cli_main(rm_args(pairs_file, out, uri, "--resume", "auto")) == 0
    assert "resumed from" in capsys.readouterr().out
    saved = torch.load(out / "checkpoints" / "global_step_4" / "reward_model" / "model.pt", weights_only=True)
    expected = torch.load(straight / "checkpoints" / "global_step_4" / "reward_model" / "model.pt", weights_only=True)
    assert saved.keys() == expected.keys()
    for name, tensor in expected.items():
        assert torch.equal(saved[name], tensor), name
    exported, expected_export = load_file(out / "model" / "model.safetensors"), \
        load_file(straight / "model" / "model.safetensors")
    for name, tensor in expected_export.items():
        assert torch.equal(exported[name], tensor), name
    # One MLflow run, continued: its losses and held-out figures are the straight run's, step for step.
    for key in ("rm/loss", "rm/val/acc", "rm/val/loss"):
        assert history(uri, key) == history(straight_uri, key), key
    assert [step for step, _ in history(uri, "rm/loss")] == [1, 2, 3, 4]
    assert len(rm_runs(uri)[1]) == 1


def test_a_truncated_reward_model_checkpoint_is_refused_in_one_line(pairs_file, tmp_path, capsys):
    uri, out = f"sqlite:///{tmp_path}/rm.db", tmp_path / "rm"
    assert cli_main(rm_args(pairs_file, out, uri, "--save-freq", "2")) == 0
    capsys.readouterr()
    weights = out / "checkpoints" / "global_step_4" / "reward_model" / "model.pt"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])  # a copy cut short
    _, [run] = rm_runs(uri)

    assert cli_main(rm_args(pairs_file, out, uri, "--resume", str(weights.parent.parent))) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(weights) in err, err
    assert f"--resume={out / 'checkpoints' / 'global_step_2'}" in err  # the hint names the valid one, as a flag
    _, runs = rm_runs(uri)
    assert [r.info.run_id for r in runs] == [run.info.run_id]  # no stray MLflow run
    assert client_status(uri, run.info.run_id) == "FINISHED"


def test_a_resume_refuses_a_new_batch_size(pairs_file, tmp_path, capsys):
    uri, out = f"sqlite:///{tmp_path}/rm.db", tmp_path / "rm"
    assert cli_main(rm_args(pairs_file, out, uri, "--epochs", "1")) == 0
    capsys.readouterr()
    args = rm_args(pairs_file, out, uri, "--resume", "auto")
    args[args.index("--batch-size") + 1] = "4"
    assert cli_main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--batch-size=4 but the checkpoint" in err and "--batch-size=2" in err, err
    assert len(rm_runs(uri)[1]) == 1


def client_status(uri, run_id):
    return mlflow.MlflowClient(tracking_uri=uri).get_run(run_id).info.status
