"""Faults a user meets, tried as the user meets them (issue 37): signals, kill -9, corrupt checkpoints, a full
disk, a shared checkpoint dir, a broken reward function, a diverging run, a changed config on resume, and a
bad data file behind an unbuilt model. Each asserts that nothing is lost and nothing passes in silence:
one line naming what happened, the right exit code and MLflow status, every step kept and logged once.

Real parts throughout: `recipezoo train` subprocesses signalled or killed from outside, trainers that send
themselves real signals through the kernel, a real MLflow sqlite store, real tmpfs for the full disk (in a
private mount namespace: skipped, with the reason, where the machine allows none). Runs use the random
2-layer model of conftest and a few steps: the whole file takes about two minutes on 2 cores.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import mlflow
import pytest
import torch
from helpers_dist import run_script

from core.cli import load_trainer_class
from core.cli import main as cli_main
from core.config import load_config
from core.engine.distributed import World
from core.trainer.checkpoint import CheckpointError, latest_checkpoint, list_checkpoints, resolve_resume
from core.trainer.guards import STEPS_IN_A_ROW, StepGuard
from core.trainer.resume import plan_resume
from core.trainer.run_dir import LOCK_NAME, claimed_run_dirs
from core.trainer.stops import Interrupted
from core.trainer.timeline import FILENAME as TIMELINE
from recipes.grpo.trainer import GRPOTrainer

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


# ---- rows 1 and 2: kill -9, SIGTERM, resume -----------------------------------------------------------
def start_train(args: list[str], err_file: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "core.cli", "train", "--recipe", "grpo", *args], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=open(err_file, "w"), text=True)


def read_until(run: subprocess.Popen, prefix: str) -> str:
    seen = []
    for line in run.stdout:
        seen.append(line)
        if line.startswith(prefix):
            return "".join(seen)
    raise AssertionError(f"the run ended (exit {run.wait()}) before printing {prefix!r}:\n{''.join(seen)[-3000:]}")


def test_kill_9_then_sigterm_then_resume_keeps_every_step_and_logs_each_once(random_model_dir, tmp_path, capsys):
    args = run_args(random_model_dir, tmp_path, "trainer.total_steps=6", "trainer.save_freq=3")
    root = tmp_path / "out" / "checkpoints"
    killed = start_train(args, tmp_path / "killed.err")
    read_until(killed, "step 4/6")  # step 4 is in MLflow; the newest checkpoint holds step 3
    killed.kill()
    killed.wait()
    assert latest_checkpoint(root) == root / "global_step_3"

    stopped = start_train(args + ["trainer.resume=auto"], tmp_path / "stopped.err")
    seen = read_until(stopped, "step 4/6")  # step 4 again, now from the checkpoint
    stopped.send_signal(signal.SIGTERM)  # as a scheduler's preemption or `timeout` sends it
    seen += stopped.communicate(timeout=300)[0]
    last = max(int(step) for step in re.findall(r"^step (\d)/6", seen, re.MULTILINE))
    saved = root / f"global_step_{last}"
    err = (tmp_path / "stopped.err").read_text()
    assert stopped.returncode == 143, err[-3000:]
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == (f"recipezoo: stopped by SIGTERM after step {last} of 6; step {last} is "
                                            f"saved in {saved} — continue with trainer.resume=auto")
    assert last in (4, 5) and latest_checkpoint(root) == saved  # not a save_freq step: the signal's save
    assert not (tmp_path / "out" / LOCK_NAME).exists() and not (root / LOCK_NAME).exists()
    client, run = mlflow_run(tmp_path)
    assert run.info.status == "KILLED"

    assert train(args + ["trainer.resume=auto"]) == 0
    assert f"resumed from {saved} at step {last}" in capsys.readouterr().out
    client, run = mlflow_run(tmp_path)
    assert run.info.status == "FINISHED" and run.data.tags["resume_count"] == "2"
    counts = entries_per_step(client, run)
    assert {step for key, step in counts if key == "actor/pg_loss"} == set(range(1, 7))
    assert {pair: n for pair, n in counts.items() if n != 1} == {}  # each (metric, step) once


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


    class TermDuringStep2(SignalledDuringStep2):
        # records the steps at which the engine was still used: weight syncs and validations
        signals = (signal.SIGTERM,)
        engine_used_at = []

        def sync_weights(self):
            self.engine_used_at.append(("sync_weights", self.global_step))
            super().sync_weights()

        def validate(self, step):
            self.engine_used_at.append(("validate", step))
            return super().validate(step)


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
    # What the run found, not Python's default: a shell starts a background job with SIGINT ignored.
    sigint_before = signal.getsignal(signal.SIGINT)
    assert train(args) == 130
    root = tmp_path / "out" / "checkpoints"
    assert last_err_line(capsys) == "recipezoo: " + expected.format(root=root)
    assert not (tmp_path / "out" / LOCK_NAME).exists() and not (root / LOCK_NAME).exists()
    if status:
        assert mlflow_run(tmp_path)[1].info.status == status
    assert signal.getsignal(signal.SIGINT) is sigint_before  # handlers restored


def test_a_stopping_run_leaves_its_engine_alone_after_the_signal(random_model_dir, tmp_path, capsys):
    """SIGTERM to a process group (`timeout`, a scheduler) reaches vLLM's and SGLang's own processes too, and they
    exit: the step in flight must not sync weights to them or validate with them, or it waits forever (seen on a
    GPU). Its update is kept: step 2 is saved."""
    trainers = write_trainer(tmp_path, SIGNALLED_TRAINERS)
    args = run_args(random_model_dir, tmp_path, "trainer.total_steps=3", "trainer.save_freq=10",
                    "trainer.test_freq=1", f"trainer.cls={trainers}:TermDuringStep2")
    assert train(args) == 143
    root = tmp_path / "out" / "checkpoints"
    assert last_err_line(capsys) == (f"recipezoo: stopped by SIGTERM after step 2 of 3; step 2 is saved in "
                                     f"{root}/global_step_2 — continue with trainer.resume=auto")
    used = sys.modules["fault_trainers"].TermDuringStep2.engine_used_at
    assert ("sync_weights", 1) in used and ("validate", 1) in used  # before the signal, as always
    assert not [use for use in used if use[1] >= 2], used


def test_a_run_stopped_by_a_signal_keeps_the_timeline_of_the_steps_it_made(random_model_dir, tmp_path, capsys):
    """bench/async_rl/suite.py's time limit stops a run with SIGTERM and reads the steps it made from its timeline,
    which the end of `fit` alone used to write."""
    trainers = write_trainer(tmp_path, SIGNALLED_TRAINERS)
    args = run_args(random_model_dir, tmp_path, "trainer.total_steps=3", "tracking.backends=[console]",
                    f"trainer.cls={trainers}:TermDuringStep2")
    assert train(args) == 143
    timeline = json.loads((tmp_path / "out" / TIMELINE).read_text())
    assert [step["step"] for step in timeline["steps"]] == [1, 2]
    assert {span["step"] for span in timeline["spans"] if span["stage"] == "update_actor"} == {1, 2}


def test_ctrl_c_under_ray_saves_the_step_and_stops_the_workers(random_model_dir, tmp_path):
    ray = pytest.importorskip("ray", reason="Ray is not installed: pip install -c constraints-cpu.txt ray")
    trainers = write_trainer(tmp_path, SIGNALLED_TRAINERS)
    config = load_config("grpo", run_args(random_model_dir, tmp_path, "trainer.total_steps=3", "trainer.save_freq=10",
                                          "tracking.backends=[console]", "trainer.controller=ray",
                                          "trainer.num_threads=1"))
    ray.shutdown()
    # address="local": a cluster of its own, not one already running on the host (ray.init would join that)
    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        trainer = load_trainer_class(f"{trainers}:CtrlC")(config)
        workers = list(trainer.actor_rollout.workers)
        with pytest.raises(Interrupted) as stop:
            trainer.fit()
        assert (stop.value.exit_code, trainer.last_saved[0]) == (130, 2)
        with pytest.raises(ray.exceptions.RayActorError):  # the worker process is gone, not left running
            ray.get(workers[0].node_id.remote(), timeout=60)
    finally:
        ray.shutdown()


def test_ranks_agree_to_stop_when_only_one_received_the_signal(tmp_path):
    result = run_script(REPO / "tests" / "dist" / "stop_flag.py", 2, tmp_path / "agreed.pt")
    assert result == {"agreed": [signal.SIGTERM, signal.SIGTERM], "received": [None, signal.SIGTERM]}


# ---- row 3: the disk fills during a save ---------------------------------------------------------------
DISK_FILLING_TRAINER = """
    from pathlib import Path

    from core.trainer.disk_space import free_bytes, state_bytes
    from recipes.grpo.trainer import GRPOTrainer


    def leave_free(directory: Path, room: int) -> None:
        \"\"\"Grow or shrink a ballast file (real bytes: tmpfs does not count holes) to leave `room` bytes free.\"\"\"
        ballast = directory / "ballast"
        size = ballast.stat().st_size if ballast.exists() else 0
        excess = free_bytes(directory) - room
        if excess > 0:
            with open(ballast, "ab") as handle:
                handle.write(bytes(excess))
        else:
            with open(ballast, "r+b") as handle:
                handle.truncate(size + excess)


    class FillsTheDiskBeforeSave2(GRPOTrainer):
        headroom = 4096  # past the tensors' bytes: the room check passes, the write runs out midway

        def save_checkpoint(self, step):
            if step == 2:
                states = {role: engine.checkpoint_state() for role, engine in self.checkpoint_engines().items()}
                leave_free(Path(self.config.trainer.output_dir), state_bytes(states) + self.headroom)
            super().save_checkpoint(step)


    class NoRoomForSave2(FillsTheDiskBeforeSave2):
        headroom = -100_000  # less than the tensors need: refused before writing
"""

DISK_FULL_RUNS = """
    import json, subprocess, sys
    mount, out = sys.argv[1], sys.argv[2]
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", mount], check=True)
    from core.cli import main
    from core.trainer.checkpoint import latest_checkpoint
    from pathlib import Path
    root, report = Path(mount) / "out" / "checkpoints", {}
    for name, extra in (("midway", []), ("no_room", ["trainer.resume=auto"])):
        trainer = "FillsTheDiskBeforeSave2" if name == "midway" else "NoRoomForSave2"
        code = main(["train", "--recipe", "grpo", *sys.argv[3:], f"trainer.output_dir={mount}/out",
                     f"trainer.cls={out}/fault_trainers.py:{trainer}", *extra])
        report[name] = {"code": code, "dirs": sorted(p.name for p in root.iterdir()),
                        "latest": str(latest_checkpoint(root))}
    Path(out, "report.json").write_text(json.dumps(report))
"""


def test_a_full_disk_names_the_bytes_removes_the_partial_save_and_keeps_latest(random_model_dir, tmp_path, capfd):
    mount = tmp_path / "small-disk"
    mount.mkdir()
    probe = subprocess.run(["unshare", "-m", "sh", "-c", f"mount -t tmpfs -o size=1m tmpfs {mount}"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"no private tmpfs here (unshare -m + mount: {probe.stderr.strip()[:200]}); needs root or "
                    "unprivileged user namespaces")
    write_trainer(tmp_path, DISK_FILLING_TRAINER)
    args = run_args(random_model_dir, tmp_path, "trainer.total_steps=3", "trainer.save_freq=1",
                    "tracking.backends=[console]")
    runs = subprocess.run(["unshare", "-m", sys.executable, "-c", textwrap.dedent(DISK_FULL_RUNS), str(mount),
                           str(tmp_path), *args], cwd=REPO, capture_output=True, text=True, timeout=400)
    assert runs.returncode == 0, runs.stderr[-3000:]
    report = __import__("json").loads((tmp_path / "report.json").read_text())
    root, kept = mount / "out" / "checkpoints", mount / "out" / "checkpoints" / "global_step_1"
    errors = [line for line in runs.stderr.splitlines() if line.startswith("recipezoo:")]
    assert len(errors) == 2 and "Traceback" not in runs.stderr, runs.stderr[-3000:]
    size = r"[\d,]+ bytes \([\d.]+ MiB\)"
    assert re.fullmatch(rf"recipezoo: disk full: the checkpoint of step 2 \({root}/global_step_2\) ran out of room "
                        rf"while writing: its tensors alone need {size}, and {size} were free when it started on "
                        rf"that disk — free some space or point trainer.checkpoint_dir at a larger disk; no partial "
                        rf"save was left behind, and the latest checkpoint is still {kept}", errors[0]), errors[0]
    assert re.fullmatch(rf"recipezoo: disk full: the checkpoint of step 2 \({root}/global_step_2\) needs at least "
                        rf"{size}, and only {size} are free on that disk — .* the latest checkpoint is still {kept}",
                        errors[1]), errors[1]
    for run in report.values():  # no .tmp- dir left, `latest` unchanged, the lock released
        assert run == {"code": 1, "dirs": ["global_step_1", "latest_checkpointed_iteration.txt"], "latest": str(kept)}


# ---- row 4: a flipped bit in a checkpoint --------------------------------------------------------------
def test_a_bit_flip_is_refused_by_name_and_auto_falls_back_to_the_previous_checkpoint(random_model_dir, tmp_path,
                                                                                      capsys):
    args = run_args(random_model_dir, tmp_path, "trainer.total_steps=2", "trainer.save_freq=1",
                    "tracking.backends=[console]")
    GRPOTrainer(load_config("grpo", args)).fit()
    root = tmp_path / "out" / "checkpoints"
    weights = root / "global_step_2" / "actor" / "model.pt"
    data = bytearray(weights.read_bytes())
    middle = len(data) // 2  # tensor bytes; the zip index at the end stays intact and the file still loads
    data[middle:middle + 4096] = bytes(b ^ 0xFF for b in data[middle:middle + 4096])
    weights.write_bytes(bytes(data))
    torch.load(weights, weights_only=True)  # what the loader used to accept silently
    capsys.readouterr()

    assert train(args + [f"trainer.resume={root / 'global_step_2'}"]) == 2
    assert last_err_line(capsys) == (
        f"recipezoo: {weights} does not match its checksum in {root}/global_step_2/SHA256SUMS (the file changed "
        f"after it was saved: a failing disk or a bad copy) — resume from the previous checkpoint with "
        f"trainer.resume={root}/global_step_1 (or delete {root}/global_step_2)")
    assert resolve_resume("auto", root) == root / "global_step_1"
    assert capsys.readouterr().out.splitlines() == [
        f"note: {weights} does not match its checksum in {root}/global_step_2/SHA256SUMS (the file changed after it "
        "was saved: a failing disk or a bad copy); trainer.resume=auto skips global_step_2 for an earlier checkpoint",
        f"note: resuming from {root}/global_step_1, the newest valid checkpoint"]
    checked = subprocess.run(["sha256sum", "-c", "--quiet", "SHA256SUMS"], cwd=root / "global_step_1")
    assert checked.returncode == 0  # standard tools read the checksum file too
    shutil.rmtree(root / "global_step_1")
    with pytest.raises(CheckpointError, match="no earlier checkpoint under .*: start fresh"):
        resolve_resume("auto", root)  # all corrupt: refused, not a silent fresh start


# ---- row 5: two runs, one checkpoint dir ---------------------------------------------------------------
def test_a_checkpoint_dir_in_use_by_another_run_is_refused(random_model_dir, tmp_path, capsys):
    shared = tmp_path / "shared-checkpoints"
    with claimed_run_dirs(tmp_path / "first", shared, saves_checkpoints=True):  # a live run holds both its dirs
        code = train(run_args(random_model_dir, tmp_path, f"trainer.checkpoint_dir={shared}",
                              f"trainer.output_dir={tmp_path}/second"))
    assert code == 2
    assert last_err_line(capsys).startswith(f"recipezoo: trainer.checkpoint_dir={shared} is in use by another run "
                                            f"(pid {os.getpid()} on ")
    assert not (tmp_path / "second" / LOCK_NAME).exists() and not list_checkpoints(shared)


# ---- rows 6 and 7: a reward function that always fails, an update that is always skipped --------------
def test_a_reward_function_failing_on_most_rows_stops_the_run_naming_it(random_model_dir, tmp_path, capsys):
    reward = tmp_path / "grader.py"
    reward.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                      "    raise ConnectionError('the grader service is down')\n")
    args = run_args(random_model_dir, tmp_path, f"reward.custom_function.path={reward}")
    assert train(args) == 1
    assert last_err_line(capsys) == (
        f"recipezoo: stopped at step 1: the reward function {reward}:compute_score failed on 8 of 8 rows of a batch, "
        "more than reward.max_error_frac=0.5; first error: ConnectionError: the grader service is down — fix the "
        "function (timeouts: raise reward.timeout_s), or raise reward.max_error_frac")
    assert mlflow_run(tmp_path)[1].info.status == "FAILED"
    assert not list_checkpoints(tmp_path / "out" / "checkpoints")


def test_steps_whose_update_is_skipped_are_counted_and_stop_the_run(random_model_dir, tmp_path, capsys):
    reward = tmp_path / "nan_reward.py"
    reward.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                      "    return float('nan')\n")
    args = run_args(random_model_dir, tmp_path, f"reward.custom_function.path={reward}", "trainer.max_bad_steps=2",
                    "trainer.save_freq=1")
    assert train(args) == 1
    assert re.fullmatch(r"recipezoo: stopped at step 2: 2 steps in a row had a non-finite loss or gradient norm "
                        r"\(actor/pg_loss=nan, actor/grad_norm=nan\), so their updates were skipped and the policy no "
                        r"longer trains — lower actor.lr \(now 0.0001\) or look for NaN/inf rewards; "
                        r"trainer.max_bad_steps=2 sets how many in a row stop the run \(0: never\)",
                        last_err_line(capsys))
    client, run = mlflow_run(tmp_path)
    history = client.get_metric_history(run.info.run_id, "actor/skipped_steps")
    # Two optimizer steps a step (4 prompts, mini-batches of 2), each skipped.
    assert sorted((point.step, point.value) for point in history) == [(1, 2.0), (2, 2.0)]
    assert run.info.status == "FAILED"


def test_collapse_signs_are_warned_once(capsys):
    guard = StepGuard(max_bad_steps=3, lr=10.0, max_response_length=6)
    for step in range(1, 3 * STEPS_IN_A_ROW):
        guard.check(step, {"actor/entropy": 1e-5, "response_length/clip_ratio": 1.0, "actor/skipped_steps": 0.0})
    warnings = capsys.readouterr().out.splitlines()
    assert [line.split(":")[1] for line in warnings] == [f" step {STEPS_IN_A_ROW}"] * 2
    assert "actor/entropy=1e-05" in warnings[0] and "actor.lr (now 10)" in warnings[0]
    assert "data.max_response_length=6" in warnings[1]
    guard.check(99, {"actor/entropy": 2.0, "response_length/clip_ratio": 0.5})
    assert capsys.readouterr().out == ""


# ---- rows 8, 9 and 10: resuming with another config ---------------------------------------------------
@pytest.fixture(scope="module")
def saved_run(random_model_dir, tmp_path_factory):
    """A finished 2-step run with a checkpoint per step, logged to MLflow: (its overrides, its dir)."""
    where = tmp_path_factory.mktemp("saved-run")
    args = run_args(random_model_dir, where, "trainer.total_steps=2", "trainer.save_freq=1")
    assert train(args) == 0
    return args, where


def test_resume_with_another_batch_size_is_refused_before_mlflow_is_touched(saved_run, capsys):
    args, where = saved_run
    client, before = mlflow_run(where)
    assert train(args + ["trainer.resume=auto", "data.train_batch_size=8"]) == 2
    checkpoint = latest_checkpoint(where / "out" / "checkpoints")
    assert last_err_line(capsys) == (
        f"recipezoo: config error: data.train_batch_size=8 but the checkpoint {checkpoint} was written with "
        "data.train_batch_size=4 — the checkpoint's data position counts batches of this size; resume with "
        "data.train_batch_size=4, or start a new run (trainer.resume=disable)")
    client, after = mlflow_run(where)
    assert (after.info.status, after.info.end_time, after.data.tags.get("resume_count")) == \
        (before.info.status, before.info.end_time, before.data.tags.get("resume_count"))


def test_resume_lists_config_changes_and_trains_with_the_new_lr(saved_run, capsys):
    args, where = saved_run
    capsys.readouterr()
    trainer = GRPOTrainer(load_config("grpo", args + ["trainer.resume=auto", "actor.lr=0.01", "trainer.total_steps=3"]))
    assert (f"resuming {where}/out/checkpoints/global_step_2 with a changed config (checkpoint → this run):\n"
            "  actor.lr: 0.0001 → 0.01\n  trainer.total_steps: 2 → 3\n") in capsys.readouterr().out
    trainer.fit()
    assert trainer.global_step == 3
    assert trainer.actor_rollout.actor.optimizer.param_groups[0]["lr"] == 0.01
    client, run = mlflow_run(where)
    assert [point.value for point in client.get_metric_history(run.info.run_id, "actor/lr")] == [1e-4, 1e-4, 0.01]


def test_resume_auto_with_no_checkpoint_says_it_starts_fresh(tmp_path, capsys):
    config = load_config("grpo", [f"trainer.output_dir={tmp_path}/tpyo", "trainer.resume=auto"])
    assert plan_resume(config, World(rank=0, size=1, device=torch.device("cpu"))) is None
    assert capsys.readouterr().out == (f"note: trainer.resume=auto found no checkpoint under {tmp_path}/tpyo/"
                                       "checkpoints; this run starts fresh\n")


# ---- row 11: cheap checks before the model -------------------------------------------------------------
@pytest.mark.parametrize("bad_file, expected", [
    ("empty", "{path}: the file is empty (0 bytes) — regenerate it"),
    ("no_ground_truth", "{path}: rows have no field 'reward_model.ground_truth' (data.ground_truth_key); found fields "
                        "['data_source', 'prompt', 'reward_model'], and 'reward_model' has ['style']; set "
                        "data.ground_truth_key=<dotted.path>"),
])
def test_a_bad_data_file_fails_before_the_embedded_model_is_warm_started(tmp_path, capsys, monkeypatch, bad_file,
                                                                         expected):
    from core.data.rows import write_rows

    cache = tmp_path / "empty-cache"
    monkeypatch.setenv("RECIPEZOO_CACHE", str(cache))  # the warm start would take minutes and fill this
    path = tmp_path / f"{bad_file}.parquet"
    if bad_file == "empty":
        path.write_bytes(b"")
    else:
        write_rows([{"data_source": "gsm8k", "prompt": "1+1?", "reward_model": {"style": "rule"}}] * 4, path)
    assert cli_main(["train", "--recipe", "grpo", "model.path=embedded://tiny-arith", f"data.train_files={path}",
                     f"trainer.output_dir={tmp_path}/out", "tracking.backends=[console]"]) == 2
    assert last_err_line(capsys).startswith("recipezoo: " + expected.format(path=path))
    assert not list(cache.glob("tiny-qwen3-arith-*")) and not (tmp_path / "out").exists()
