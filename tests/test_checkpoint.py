"""Checkpoints: exact resume, a crash during save, keep-last-k, and `recipezoo merge`."""

import errno
import os
import random
import subprocess
import sys
import textwrap

import mlflow
import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from core.cli import main as cli_main
from core.config import load_config
from core.trainer.checkpoint import (
    CheckpointError,
    capture_rng_state,
    latest_checkpoint,
    list_checkpoints,
    resolve_resume,
    restore_rng_state,
)
from recipes.grpo.trainer import GRPOTrainer

# Timing and throughput differ between any two runs; everything else must not.
WALL_CLOCK_PREFIXES = ("timing_s/", "perf/")


class LengthRewardGRPO(GRPOTrainer):
    """A random model scores 0 on the task; a length reward gives real, varying advantages."""

    def compute_rewards(self, batch):
        batch = super().compute_rewards(batch)
        batch.tensors["token_level_scores"] = batch["token_level_scores"] - 0.05 * batch["response_mask"]
        return batch


class CrashAtStep3(LengthRewardGRPO):
    def generate(self, prompts, params=None):
        if self.global_step == 3:
            raise RuntimeError("simulated crash at step 3")
        return super().generate(prompts, params)


def overrides(fast_overrides, tmp_path, name, *extra):
    return [o for o in fast_overrides if not o.startswith(("trainer.output_dir", "tracking.backends",
                                                           "trainer.total_steps", "trainer.test_freq"))] + [
        "trainer.total_steps=4", "trainer.save_freq=2", "trainer.test_freq=2",
        "data.train_batch_size=8", "actor.ppo_mini_batch_size=4", "rollout.n=4",
        f"trainer.output_dir={tmp_path}/{name}", "tracking.backends=[mlflow]",
        f"tracking.uri=sqlite:///{tmp_path}/mlflow.db", f"tracking.run_name={name}", *extra]


def metric_table(run_id, uri):
    """{(key, step): value}, the last value logged at each step."""
    client = mlflow.MlflowClient(tracking_uri=uri)
    table = {}
    for key in client.get_run(run_id).data.metrics:
        if key.startswith(WALL_CLOCK_PREFIXES):
            continue
        for point in sorted(client.get_metric_history(run_id, key), key=lambda p: p.timestamp):
            table[(key, point.step)] = point.value
    return table


def test_a_run_resumed_after_a_crash_logs_the_same_metrics_as_an_uninterrupted_run(fast_overrides, tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    straight = LengthRewardGRPO(load_config("grpo", overrides(fast_overrides, tmp_path, "straight")))
    straight.fit()
    with pytest.raises(RuntimeError, match="simulated crash"):
        CrashAtStep3(load_config("grpo", overrides(fast_overrides, tmp_path, "crashed"))).fit()
    crashed_run = mlflow.MlflowClient(tracking_uri=uri).search_runs(
        [straight.tracking.backends[0].experiment_id], "attributes.run_name = 'crashed'")[0]
    assert crashed_run.info.status == "FAILED"

    resumed = LengthRewardGRPO(load_config("grpo", overrides(fast_overrides, tmp_path, "crashed",
                                                             "trainer.resume=auto")))
    resumed.fit()
    assert resumed.tracking.run_id == crashed_run.info.run_id  # the same MLflow run continues
    run = mlflow.MlflowClient(tracking_uri=uri).get_run(crashed_run.info.run_id)
    assert run.info.status == "FINISHED" and run.data.tags["resume_count"] == "1"

    expected = metric_table(straight.tracking.run_id, uri)
    got = metric_table(resumed.tracking.run_id, uri)
    later = {k: v for k, v in expected.items() if k[1] >= 3}
    assert any(key == "actor/pg_loss" for key, _ in later) and ("val/acc", 4) in later
    assert {k: got.get(k) for k in later} == later
    assert resumed.val_history == straight.val_history
    for before, after in zip(straight.actor_rollout.actor.full_state_dict().values(),
                             resumed.actor_rollout.actor.full_state_dict().values()):
        assert torch.equal(before, after)


CRASH_DURING_SAVE = textwrap.dedent("""
    import os, sys
    import core.trainer.checkpoint as checkpoint
    from core.config import load_config
    from recipes.grpo.trainer import GRPOTrainer

    real_save = checkpoint._save_synced
    def save_then_die(obj, path):
        real_save(obj, path)
        if "global_step_2" in str(path) and path.name == "optimizer.pt":
            os._exit(17)  # a hard kill: no exception handlers, no cleanup
    checkpoint._save_synced = save_then_die
    GRPOTrainer(load_config("grpo", sys.argv[1:])).fit()
""")


def test_a_crash_during_save_leaves_the_previous_checkpoint_loadable(fast_overrides, tmp_path):
    args = [o for o in fast_overrides if not o.startswith("trainer.total_steps")]
    args += ["trainer.total_steps=3", "trainer.save_freq=1", "trainer.max_ckpt_to_keep=2"]
    root = tmp_path / "out" / "checkpoints"
    died = subprocess.run([sys.executable, "-c", CRASH_DURING_SAVE, *args], capture_output=True, text=True)
    assert died.returncode == 17, died.stderr[-2000:]
    assert (root / ".tmp-global_step_2").is_dir()  # the half-written save...
    assert latest_checkpoint(root) == root / "global_step_1"  # ...is never taken for a checkpoint

    trainer = GRPOTrainer(load_config("grpo", args + ["trainer.resume=auto"]))
    assert trainer.resume_from == root / "global_step_1"
    trainer.fit()
    assert trainer.global_step == 3
    assert [step for step, _ in list_checkpoints(root)] == [2, 3]  # keep the last 2
    assert not list(root.glob(".tmp-*"))
    assert (root / "latest_checkpointed_iteration.txt").read_text() == "3"


def test_merge_writes_a_hf_dir_with_the_trained_weights(fast_overrides, tmp_path):
    trainer = LengthRewardGRPO(load_config("grpo", fast_overrides + ["trainer.save_freq=1"]))
    trainer.fit()
    out = tmp_path / "merged"
    assert cli_main(["merge", "--checkpoint", str(tmp_path / "out" / "checkpoints"), "--out", str(out)]) == 0
    assert (out / "model.safetensors").is_file() and (out / "tokenizer_config.json").is_file()
    merged = AutoModelForCausalLM.from_pretrained(out).eval()
    rollout_model = trainer.actor_rollout.rollout.model  # holds the synced, trained weights
    input_ids = torch.randint(3, 30, (2, 12))
    with torch.no_grad():
        assert torch.equal(merged(input_ids=input_ids).logits, rollout_model(input_ids=input_ids).logits)


def test_merge_names_a_missing_checkpoint(tmp_path, capsys):
    assert cli_main(["merge", "--checkpoint", str(tmp_path / "nope"), "--out", str(tmp_path / "o")]) == 1
    assert "--checkpoint=" in capsys.readouterr().err


def test_resume_from_a_path_that_is_not_a_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(CheckpointError, match=r"trainer.resume=.*does not exist"):
        resolve_resume(str(tmp_path / "missing"), tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="no complete global_step_N"):
        resolve_resume(str(tmp_path / "empty"), tmp_path)
    assert resolve_resume("auto", tmp_path / "none-yet") is None
    assert resolve_resume("disable", tmp_path) is None


def test_rng_state_round_trips_through_a_weights_only_load(tmp_path):
    state = capture_rng_state()
    torch.save(state, tmp_path / "rng.pt")
    expected = (random.random(), np.random.rand(), torch.rand(1).item())
    restore_rng_state(torch.load(tmp_path / "rng.pt", weights_only=True))
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == expected


# ---- bad checkpoints and checkpoint dirs fail before step 1 -----------------------------------------
def fake_checkpoint(root, step):
    """The files a checkpoint holds, with small contents (only their integrity is checked here)."""
    path = root / f"global_step_{step}"
    for name in ("actor/model.pt", "actor/optimizer.pt", "actor/scheduler.pt", "trainer_state.pt"):
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        torch.save({"weights": torch.zeros(64)}, path / name)
    (root / "latest_checkpointed_iteration.txt").write_text(str(step))
    return path


def test_a_truncated_latest_checkpoint_is_skipped_by_auto_and_refused_by_name(fast_overrides, tmp_path, capsys):
    root = tmp_path / "checkpoints"
    previous = fake_checkpoint(root, 2)
    latest = fake_checkpoint(root, 4)
    weights = latest / "actor" / "model.pt"
    weights.write_bytes(weights.read_bytes()[:100])  # a copy cut short
    assert resolve_resume("auto", root) == previous
    out = capsys.readouterr().out
    assert f"note: {weights} is truncated or corrupt" in out and "skips global_step_4 for an earlier" in out
    with pytest.raises(CheckpointError) as info:
        resolve_resume(str(latest), root)
    assert f"{weights} is truncated or corrupt" in str(info.value)
    assert f"resume from the previous checkpoint with trainer.resume={previous}" in str(info.value)
    code = cli_main(["train", "--recipe", "grpo", *fast_overrides, f"trainer.checkpoint_dir={root}",
                     f"trainer.resume={latest}"])
    err = capsys.readouterr().err
    assert code == 2 and f"recipezoo: {weights} is truncated or corrupt" in err and "Traceback" not in err


def test_the_only_checkpoint_truncated_says_to_start_fresh(tmp_path):
    weights = fake_checkpoint(tmp_path, 2) / "trainer_state.pt"
    weights.write_bytes(b"")
    with pytest.raises(CheckpointError, match="no earlier checkpoint under .*: start fresh with trainer.resume=disable"):
        resolve_resume("auto", tmp_path)


@pytest.fixture
def read_only_dir(tmp_path, monkeypatch):
    path = tmp_path / "read-only"
    path.mkdir()
    path.chmod(0o555)
    if os.access(path, os.W_OK):  # root ignores modes: refuse as a read-only mount would
        real_mkdir = os.mkdir

        def mkdir(target, *args, **kwargs):
            if str(target).startswith(str(path)):
                raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(target))
            return real_mkdir(target, *args, **kwargs)

        monkeypatch.setattr(os, "mkdir", mkdir)
    yield path
    path.chmod(0o755)


def test_a_read_only_checkpoint_dir_fails_before_the_trainer_is_built(fast_overrides, read_only_dir, tmp_path,
                                                                      monkeypatch, capsys):
    def refuse(*args, **kwargs):
        raise AssertionError("a read-only checkpoint dir must fail before the trainer is built")

    monkeypatch.setattr(GRPOTrainer, "__init__", refuse)
    checkpoints = read_only_dir / "checkpoints"
    code = cli_main(["train", "--recipe", "grpo", *fast_overrides, f"trainer.checkpoint_dir={checkpoints}"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"recipezoo: trainer.checkpoint_dir={checkpoints} is not writable (" in err
    assert "set trainer.save_freq=0" in err and len(err.strip().splitlines()) == 1
