"""Tracking against a real MLflow sqlite store (no mocks): what a run logs can be read back."""

from __future__ import annotations

import importlib.util
import io
import math
import subprocess
import tarfile
from pathlib import Path

import mlflow
import numpy as np
import pytest
import torch
import yaml

from core.tracking.archive_commit import archive_commit
from core.tracking.console import ConsoleLogger, format_duration
from core.tracking.metrics import as_float, reduce_metrics, timed
from core.tracking.mlflow_tracker import MLflowTracker, normalize_tracking_uri, store_init_lock
from core.tracking.run_status import exit_status
from core.tracking.tracker import Tracking, build_tracking

CONFIG = {
    "algorithm": {"adv_estimator": "grpo", "kl_ctrl": {"kl_coef": 0.001}},
    "actor": {"optim": {"lr": 1e-6}, "clip_ratio": [0.2, 0.28]},
    "data": {"train_files": "train.parquet", "empty": {}, "prompt_template": "x" * 7000},
    "wide": {f"k{i:03d}": i for i in range(150)},  # > 100 params: several log_batch calls
}


@pytest.fixture(scope="module")
def store_uri(tmp_path_factory):
    # Creating a sqlite store runs MLflow's schema migrations (~7 s); do it once per module.
    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"
    mlflow.MlflowClient(uri).search_experiments()
    return uri


@pytest.fixture(autouse=True)
def outside_git_repo(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the git tag then reads "unknown", independent of this checkout


def test_run_records_config_provenance_and_metric_history(store_uri):
    with MLflowTracker(store_uri, "test-exp", "grpo-tiny", CONFIG, seed=7) as tracker:
        for step in (1, 2, 3):
            metrics = {"critic/score/mean": 0.1 * step, "actor/pg_loss": torch.tensor(-1.5),
                       "actor/grad_norm": np.float32(2.0)}
            tracker.log_metrics(metrics, step=step)
    client = mlflow.MlflowClient(store_uri)
    run = client.get_run(tracker.run_id)
    params, tags = run.data.params, run.data.tags

    assert run.info.status == "FINISHED" and run.info.run_name == "grpo-tiny"
    assert params["algorithm.adv_estimator"] == "grpo"
    assert params["algorithm.kl_ctrl.kl_coef"] == "0.001"
    assert params["actor.clip_ratio"] == "[0.2, 0.28]"
    assert params["data.empty"] == "{}"
    assert params["wide.k149"] == "149"
    assert len(params["data.prompt_template"]) == 6000
    assert params["data.prompt_template"].endswith("...[truncated]")
    assert tags["seed"] == "7" and tags["git_commit"] == (archive_commit() or "unknown")  # outside a checkout
    assert {"version.python", "version.torch", "version.mlflow", "hostname", "command"} <= set(tags)

    history = client.get_metric_history(tracker.run_id, "critic/score/mean")
    assert [(m.step, round(m.value, 6)) for m in history] == [(1, 0.1), (2, 0.2), (3, 0.3)]
    assert client.get_metric_history(tracker.run_id, "actor/pg_loss")[0].value == -1.5
    assert client.get_metric_history(tracker.run_id, "actor/grad_norm")[0].value == 2.0

    config_file = client.download_artifacts(tracker.run_id, "config.yaml")
    with open(config_file) as f:
        assert yaml.safe_load(f) == CONFIG


def test_exception_inside_run_marks_it_failed_and_keeps_earlier_metrics(store_uri):
    with pytest.raises(RuntimeError, match="loss exploded"):
        with MLflowTracker(store_uri, "test-exp", "crashes", {"a": 1}, seed=0) as tracker:
            tracker.log_metrics({"actor/pg_loss": 0.5}, step=1)
            tracker.log_metrics({"actor/pg_loss": 0.25}, step=2)
            raise RuntimeError("loss exploded")
    client = mlflow.MlflowClient(store_uri)
    assert client.get_run(tracker.run_id).info.status == "FAILED"
    history = client.get_metric_history(tracker.run_id, "actor/pg_loss")
    assert [(m.step, m.value) for m in history] == [(1, 0.5), (2, 0.25)]


def test_nan_is_logged_and_non_numbers_are_skipped_with_a_warning(store_uri):
    with MLflowTracker(store_uri, "test-exp", "odd-values", {}, seed=0) as tracker:
        with pytest.warns(UserWarning) as warned:
            tracker.log_metrics({"actor/pg_loss": float("nan"), "note": "hello",
                                 "vector": torch.ones(3), "val-core/gsm8k/acc/mean@4": 0.5}, step=1)
    assert ["'note' is a str" in str(w.message) or "'vector' is a Tensor" in str(w.message)
            for w in warned] == [True, True]
    client = mlflow.MlflowClient(store_uri)
    assert math.isnan(client.get_metric_history(tracker.run_id, "actor/pg_loss")[0].value)
    metrics = client.get_run(tracker.run_id).data.metrics
    assert set(metrics) == {"actor/pg_loss", "val-core/gsm8k/acc/mean_at_4"}


def test_ui_hint_and_default_store(store_uri, tmp_path):
    with MLflowTracker(store_uri, "test-exp", "hint", {}, seed=0) as tracker:
        assert tracker.ui_hint() == f"mlflow ui --backend-store-uri {store_uri}"
    assert normalize_tracking_uri(None) == f"sqlite:///{tmp_path}/mlflow.db"
    assert normalize_tracking_uri("runs/x.db") == f"sqlite:///{tmp_path}/runs/x.db"


def test_store_lock_creates_the_database_directory(tmp_path):
    # sqlite cannot create directories; the lock (taken before MLflow opens the store) does.
    with store_init_lock(f"sqlite:///{tmp_path}/runs/new/mlflow.db"):
        assert (tmp_path / "runs" / "new").is_dir()


def test_build_tracking_fans_out_to_console_and_mlflow(store_uri, capsys):
    cfg = {"backends": ["console", "mlflow"], "uri": store_uri, "experiment": "fanout",
           "run_name": "grpo-tiny", "tags": {"recipe": "grpo"}}
    with pytest.raises(ValueError):
        with build_tracking(cfg, {"seed": 3}, seed=3, total_steps=10) as tracking:
            tracking.log_metrics({"critic/score/mean": 0.5, "timing_s/step": 2.0}, step=1)
            raise ValueError("bad batch")
    mlflow_backend = tracking.backends[1]
    run = mlflow.MlflowClient(store_uri).get_run(mlflow_backend.run_id)
    assert run.info.status == "FAILED" and run.data.tags["recipe"] == "grpo"
    out = capsys.readouterr().out
    assert "mlflow ui --backend-store-uri" in out
    assert "step 1/10 | reward 0.5 | 2 s/step | ETA 18s" in out
    assert "run FAILED" in out


def test_unknown_backend_names_the_config_key_and_valid_names():
    expected = r"tracking\.backends.*wandb.*valid names: console, mlflow"
    with pytest.raises(ValueError, match=expected):
        build_tracking({"backends": ["console", "wandb"]}, {}, seed=0, total_steps=1)


def test_non_zero_rank_gets_no_backends_but_still_checks_names():
    assert build_tracking({"backends": ["console", "mlflow"]}, {}, 0, 10, rank=1).backends == []
    with pytest.raises(ValueError, match="tensorboard"):
        build_tracking({"backends": "tensorboard"}, {}, seed=0, total_steps=1, rank=1)


def test_console_line_shows_values_step_time_and_eta(capsys):
    logger = ConsoleLogger(total_steps=200, acc_key="critic/acc/mean")
    metrics = {"critic/score/mean": 0.41, "critic/acc/mean": 0.38, "actor/kl_loss": 0.0012,
               "actor/ppo_kl": 9.0, "timing_s/step": 1.9}
    logger.log_metrics(metrics, step=12)
    assert capsys.readouterr().out == (
        "step 12/200 | reward 0.41 | acc 0.38 | kl 0.0012 | 1.9 s/step | ETA 5m57s\n"
    )


def test_console_eta_uses_running_mean_and_falls_back_to_ppo_kl(capsys):
    logger = ConsoleLogger(total_steps=100)
    logger.log_metrics({"actor/ppo_kl": 0.02, "timing_s/step": 1.0}, step=1)
    logger.log_metrics({"actor/ppo_kl": 0.03, "timing_s/step": 3.0}, step=2)
    last = capsys.readouterr().out.splitlines()[-1]
    assert last == "step 2/100 | kl 0.03 | 3 s/step | ETA 3m16s"  # mean 2 s x 98 steps


def test_console_validation_line_and_quiet_rank(capsys):
    ConsoleLogger(10).log_metrics({"val/gsm8k/acc": 0.625, "val/aime/acc": 0.1}, step=5)
    ConsoleLogger(10, rank=1).log_metrics({"critic/score/mean": 1.0, "val/gsm8k/acc": 1.0}, step=5)
    assert capsys.readouterr().out == "validation step 5 | val/aime/acc 0.1 | val/gsm8k/acc 0.625\n"


def test_format_duration():
    assert [format_duration(s) for s in (45, 364, 7620)] == ["45s", "6m04s", "2h07m"]


def test_reduce_metrics_means_each_key_over_dicts_that_have_it():
    reduced = reduce_metrics([{"loss": torch.tensor(1.0), "clipfrac": 0.5},
                              {"loss": 3.0, "note": "x"}])
    assert reduced == {"loss": 2.0, "clipfrac": 0.5}


def test_as_float_converts_scalars_and_rejects_the_rest():
    assert as_float(torch.tensor([2.5])) == 2.5 and as_float(np.int64(3)) == 3.0
    assert as_float(True) == 1.0
    assert as_float("1.0") is None and as_float(torch.ones(2)) is None and as_float(None) is None


def test_timed_adds_seconds_under_timing_key():
    timings: dict[str, float] = {}
    with timed("gen", timings):
        pass
    first = timings["timing_s/gen"]
    with timed("gen", timings):
        sum(range(10_000))
    assert timings["timing_s/gen"] > first >= 0.0


def test_tracking_finishes_every_backend_even_if_one_fails():
    class Broken:
        def finish(self, status):
            raise ConnectionError("server down")

    class Recorder:
        status = None

        def finish(self, status):
            self.status = status

    recorder = Recorder()
    with pytest.raises(ConnectionError):
        Tracking([Broken(), recorder]).finish("FAILED")
    assert recorder.status == "FAILED"


def test_exit_status_is_killed_for_ctrl_c_and_failed_for_other_errors():
    assert exit_status(None) == "FINISHED"
    assert exit_status(KeyboardInterrupt) == "KILLED"
    assert exit_status(ValueError) == "FAILED"


def test_a_source_archive_names_its_commit_outside_a_checkout(tmp_path):
    """`git archive` writes HEAD into core/tracking/archive_commit.py (export-subst): a run started from the
    unpacked tree, which no git command can ask, still records the commit its code came from."""
    repo = Path(__file__).resolve().parents[1]
    if not (repo / ".git").exists():
        pytest.skip("needs a git checkout to archive")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, check=True)
    archive = subprocess.run(["git", "archive", "HEAD", "core/tracking/archive_commit.py"], cwd=repo,
                             capture_output=True, check=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as unpacking:
        unpacking.extractall(tmp_path, filter="data")
    spec = importlib.util.spec_from_file_location("unpacked", tmp_path / "core/tracking/archive_commit.py")
    unpacked = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(unpacked)
    assert unpacked.archive_commit() == head.stdout.strip()
    assert archive_commit() is None  # this checkout: the placeholder, and git answers


def test_memory_metrics_are_the_cuda_peaks_in_gib_and_absent_on_a_cpu(monkeypatch):
    """No GPU here: the CUDA allocator's counters are monkeypatched (a mock, said so) to check the units and names;
    the unpatched call checks that a CPU run logs no memory keys rather than zeros."""
    from core.trainer.metrics import memory_metrics

    if not torch.cuda.is_available():
        assert memory_metrics() == {}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda: 3 * 2**30)
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda: 4.5 * 2**30)
    assert memory_metrics() == {"perf/max_memory_allocated_gb": 3.0, "perf/max_memory_reserved_gb": 4.5}
