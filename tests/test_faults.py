"""Faults a user meets, tried as the user meets them (issue 37): signals, kill -9, corrupt checkpoints, a full
disk, a shared checkpoint dir, a broken reward function, a diverging run, a changed config on resume, and a
bad data file behind an unbuilt model. Each asserts that nothing is lost and nothing passes in silence:
one line naming what happened, the right exit code and MLflow status, every step kept and logged once.

Real parts throughout: `recipezoo train` subprocesses signalled or killed from outside, trainers that send
themselves real signals through the kernel, a real MLflow sqlite store, real tmpfs for the full disk (in a
private mount namespace: skipped, with the reason, where the machine allows none). Runs use the random
2-layer model of conftest and a few steps: the whole file takes about two minutes on 2 cores.
"""

import signal
import textwrap
from collections import Counter
from pathlib import Path

import mlflow
import pytest
from helpers_dist import run_script

from core.cli import main as cli_main
from core.trainer.run_dir import LOCK_NAME

REPO = Path(__file__).resolve().parent.parent


def run_args(model_dir, tmp_path, *changes: str) -> list[str]:
    """A tiny GRPO run logging to MLflow in `tmp_path`; `changes` replace or add overrides."""
    args = {"model.path": model_dir, "trainer.total_steps": "4", "trainer.save_freq": "2", "trainer.test_freq": "0",
            "data.train_batch_size": "4", "actor.ppo_mini_batch_size": "2", "rollout.n": "2",
            "data.max_response_length": "6", "tracking.run_name": "faults",
            # MLflow first: once the console prints a step, that step is in the store
            "tracking.backends": "[mlflow,console]", "tracking.uri": f"sqlite:///{tmp_path}/mlflow.db",
            "trainer.output_dir": f"{tmp_path}/out"}
    args.update(change.split("=", 1) for change in changes)
    return [f"{key}={value}" for key, value in args.items()]


def train(args: list[str]) -> int:
    return cli_main(["train", "--recipe", "grpo", *args])


def last_err_line(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    return err.strip().splitlines()[-1]


def mlflow_run(tmp_path, name: str = "faults"):
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    runs = client.search_runs([client.get_experiment_by_name("recipezoo").experiment_id],
                              f"attributes.run_name = '{name}'")
    assert len(runs) == 1, [run.info.run_id for run in runs]
    return client, runs[0]


def entries_per_step(client, run) -> Counter:
    """(metric, step) -> how many entries the store holds for it."""
    counts = Counter()
    for key in run.data.metrics:
        counts.update((key, point.step) for point in client.get_metric_history(run.info.run_id, key))
    return counts


def write_trainer(tmp_path, source: str) -> Path:
    path = tmp_path / "fault_trainers.py"
    path.write_text(textwrap.dedent(source))
    return path


# ---- SIGINT and a second signal, sent by the trainer to itself through the kernel ---------------------
SIGNALLED_TRAINERS = """
    import os
    import signal

    from recipes.grpo.trainer import GRPOTrainer


    class SignalledDuringStep2(GRPOTrainer):
        signals = ()

        def generate(self, prompts, params=None):
            if self.global_step == 2:
                for signum in self.signals:
                    os.kill(os.getpid(), signum)
            return super().generate(prompts, params)


    class CtrlC(SignalledDuringStep2):
        signals = (signal.SIGINT,)


    class TermThenCtrlC(SignalledDuringStep2):
        signals = (signal.SIGTERM, signal.SIGINT)


    class CtrlCWhileBuilding(GRPOTrainer):
        def __init__(self, config):
            os.kill(os.getpid(), signal.SIGINT)
            super().__init__(config)
"""


@pytest.mark.parametrize("trainer, save_freq, expected, status", [
    ("CtrlC", 10, "stopped by SIGINT after step 2 of 3; step 2 is saved in {root}/global_step_2 — continue with "
                  "trainer.resume=auto", "KILLED"),
    ("TermThenCtrlC", 1, "stopped by SIGINT during step 2, which was abandoned; the latest checkpoint is "
                         "{root}/global_step_1 (step 1) — continue with trainer.resume=auto", "KILLED"),
    ("CtrlCWhileBuilding", 1, "stopped by SIGINT", None),
])
def test_ctrl_c_ends_in_one_line_exit_130_and_a_released_lock(random_model_dir, tmp_path, capsys, trainer,
                                                                save_freq, expected, status):
    trainers = write_trainer(tmp_path, SIGNALLED_TRAINERS)
    args = run_args(random_model_dir, tmp_path, "trainer.total_steps=3", f"trainer.save_freq={save_freq}",
                    f"trainer.cls={trainers}:{trainer}")
    assert train(args) == 130
    root = tmp_path / "out" / "checkpoints"
    assert last_err_line(capsys) == "recipezoo: " + expected.format(root=root)
    assert not (tmp_path / "out" / LOCK_NAME).exists() and not (root / LOCK_NAME).exists()
    if status:
        assert mlflow_run(tmp_path)[1].info.status == status
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # handlers restored


def test_ranks_agree_to_stop_when_only_one_received_the_signal(tmp_path):
    result = run_script(REPO / "tests" / "dist" / "stop_flag.py", 2, tmp_path / "agreed.pt")
    assert result == {"agreed": [signal.SIGTERM, signal.SIGTERM], "received": [None, signal.SIGTERM]}
