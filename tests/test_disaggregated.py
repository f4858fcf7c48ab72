"""`trainer.placement=disaggregated` for real: a local Ray cluster whose rollout workers are processes of their
own, fed after every update by the trainer's weight stream (gloo on CPU)."""

import threading
import time

import pytest
import torch

ray = pytest.importorskip("ray", reason="Ray is not installed: pip install -c constraints-cpu.txt ray")

from core.cli import main as cli_main  # noqa: E402
from core.config import load_config  # noqa: E402
from core.data.dataset import collate_prompts  # noqa: E402
from core.rollout.base import SamplingParams  # noqa: E402
from core.trainer.checkpoint import latest_checkpoint  # noqa: E402
from core.trainer.ray_controller import WorkerDiedError  # noqa: E402
from recipes.grpo.trainer import GRPOTrainer  # noqa: E402

DISAGGREGATED = ["trainer.controller=ray", "trainer.placement=disaggregated", "trainer.num_threads=1"]
VARIED_REWARD = ("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                 "    return (sum(map(ord, solution_str)) % 7) / 6  # varies, so every step changes the weights\n")
PROBE = SamplingParams(n=1, temperature=1.0, max_new_tokens=6, seed=1)  # the same draw before and after a sync


def start_ray(num_cpus: int) -> None:
    ray.shutdown()
    # address="local": a cluster of its own, not one already running on the host (ray.init would join that)
    ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)


def tiny_run(model_dir, out, *extra):
    """A few fast GRPO steps on the random model, every step changing the weights."""
    reward = out.parent / "varied_reward.py"
    reward.write_text(VARIED_REWARD)
    return load_config("grpo", [
        f"model.path={model_dir}", "trainer.test_freq=0", "data.train_batch_size=4", "actor.ppo_mini_batch_size=2",
        "rollout.n=2", "data.max_response_length=6", "tracking.backends=[console]", "actor.lr=0.01",
        f"reward.custom_function.path={reward}", f"trainer.output_dir={out}", *extra])


@pytest.fixture(scope="module")
def synced(random_model_dir, tmp_path_factory):
    """Two sync-schedule steps with 2 training ranks and 2 rollout workers (4 processes). After the start-up
    sync and after each step's: the trainer's weights, each rollout worker's, a probe generation on held-out
    prompts (same prompts, same seed) and the trainer's own log-probs of the probe's tokens."""
    records = []

    def record(trainer):
        group = trainer.actor_rollout
        engines = ray.get([worker.__ray_call__.remote(lambda actor: actor.rollout.model.state_dict())
                           for worker in group.rollout_workers])
        probe = group.generate(probe_prompts, PROBE)
        records.append({"trainer": group.actor.full_state_dict(), "engines": engines, "probe": probe,
                        "trainer_log_probs": group.compute_log_probs(probe)["old_log_probs"]})

    class RecordSyncs(GRPOTrainer):
        def sync_weights(self):
            super().sync_weights()
            record(self)

    start_ray(num_cpus=4)
    try:
        config = tiny_run(random_model_dir, tmp_path_factory.mktemp("synced") / "out", *DISAGGREGATED,
                          "trainer.total_steps=2", "trainer.n_gpus_per_node=2", "trainer.rollout_workers=2",
                          "trainer.save_freq=0")
        trainer = RecordSyncs(config)
        val = trainer.val_dataset
        probe_prompts = collate_prompts([val[i] for i in range(4)], val.pad_token_id)
        record(trainer)  # the engines as the start-up sync left them
        trainer.fit()
    finally:
        ray.shutdown()
    return records


def test_every_stream_leaves_every_rollout_worker_with_the_trainers_weights_bit_for_bit(synced):
    assert len(synced) == 3, "the start-up sync and one per step"
    for sync, record in enumerate(synced):
        trained = record["trainer"]
        for rank, engine in enumerate(record["engines"]):
            assert engine.keys() == trained.keys() and len(engine) > 10
            for name, tensor in engine.items():
                assert tensor.dtype == trained[name].dtype and torch.equal(tensor, trained[name]), (sync, rank, name)
    assert any(not torch.equal(synced[0]["trainer"][name], synced[-1]["trainer"][name]) for name in synced[0]["trainer"])


def test_the_rollout_workers_generate_with_the_weights_just_streamed(synced):
    probes = [record["probe"] for record in synced]
    for before, after in zip(probes, probes[1:]):  # same prompts, same seed: only the weights changed
        assert not torch.equal(before["rollout_log_probs"], after["rollout_log_probs"])
    for record in synced:  # the engine's log-probs are the trainer's own on the same tokens: fp32 on both sides
        mask = record["probe"]["response_mask"]
        gap = ((record["probe"]["rollout_log_probs"] - record["trainer_log_probs"]) * mask).abs().max().item()
        assert gap < 1e-4


def test_async_on_rollout_workers_keeps_every_batch_within_max_staleness(random_model_dir, tmp_path):
    start_ray(num_cpus=2)
    try:
        trainer = GRPOTrainer(tiny_run(random_model_dir, tmp_path / "out", *DISAGGREGATED, "trainer.schedule=async",
                                       "trainer.max_staleness=2", "trainer.total_steps=5", "trainer.save_freq=0"))
        logged, _ = record_steps(trainer)
        trainer.fit()  # a batch over the bound would stop the run (tests/test_schedule.py)
    finally:
        ray.shutdown()
    staleness = [logged[step]["rollout_corr/staleness/max"] for step in range(1, 6)]
    assert staleness[0] == 0 and max(staleness) <= 2 and max(staleness[1:]) >= 1, staleness


@pytest.mark.parametrize("when", ["generate", "sync_weights"])
def test_a_killed_rollout_worker_stops_the_run_by_name_and_the_last_checkpoint_resumes(when, random_model_dir,
                                                                                       tmp_path):
    """Killed at step 2 while generating step 3's batch in the background, or as step 2's weights stream to it."""
    class KillTheRolloutWorkerAtStep2(GRPOTrainer):
        def generate(self, prompts, params=None):
            self.kill_at("generate")
            return super().generate(prompts, params)

        def sync_weights(self):
            self.kill_at("sync_weights")
            super().sync_weights()

        def kill_at(self, where):
            if where == when and self.global_step == 2:
                ray.kill(self.actor_rollout.rollout_workers[0])

    common = [*DISAGGREGATED, "trainer.schedule=one_step_off", "trainer.total_steps=3", "trainer.save_freq=1"]
    root = tmp_path / "out" / "checkpoints"
    start_ray(num_cpus=2)
    try:
        trainer = KillTheRolloutWorkerAtStep2(tiny_run(random_model_dir, tmp_path / "out", *common))
        with pytest.raises(WorkerDiedError, match=r"^rollout worker rank 0 of 1 died \(\w+\); the group was shut "
                                                  r"down\. The last checkpoint is intact: rerun with trainer.resume=auto"):
            trainer.fit()
        assert not trainer.actor_rollout.workers and not trainer.actor_rollout.rollout_workers, "every actor stopped"
        assert latest_checkpoint(root) == root / "global_step_1"
        # A fresh group loads the checkpoint on the training ranks and streams it to a fresh rollout worker.
        resumed = GRPOTrainer(tiny_run(random_model_dir, tmp_path / "out", *common, "trainer.resume=auto"))
        resumed.fit()
    finally:
        ray.shutdown()
    assert resumed.global_step == 3 and latest_checkpoint(root) == root / "global_step_3"


def test_a_cluster_without_a_device_for_every_worker_is_refused_before_any_starts(fast_overrides, capsys):
    start_ray(num_cpus=2)
    try:
        code = cli_main(["train", "--recipe", "grpo", *fast_overrides, *DISAGGREGATED, "trainer.n_gpus_per_node=2",
                         "trainer.rollout_workers=1"])
        assert ray.available_resources().get("CPU") == 2, "no worker was started"
    finally:
        ray.shutdown()
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert ("trainer.nnodes × trainer.n_gpus_per_node = 2 training ranks + trainer.rollout_workers=1 need 3 CPU "
            "slots, and the Ray cluster has 2 — ") in err


LEARN_STEPS, MIN_GAIN = 30, 0.08


@pytest.mark.slow
def test_one_step_off_on_rollout_workers_of_their_own_learns_the_tiny_task_one_version_behind(tmp_path):
    """One training rank and one rollout worker, each a process of its own: step k+1's rollouts are generated
    while step k trains, every batch after the first is exactly one version old, and 30 steps gain at least
    `MIN_GAIN` of held-out accuracy, the Ray controller's bar (tests/test_ray_controller.py); +0.125 with this
    seed, as the local controller's one-step-off run gets (0.656 -> 0.781)."""
    start_ray(num_cpus=2)
    try:
        trainer = GRPOTrainer(load_config("grpo", [
            *DISAGGREGATED, "trainer.schedule=one_step_off", f"trainer.total_steps={LEARN_STEPS}",
            f"trainer.test_freq={LEARN_STEPS}", "data.val_max_samples=128", "trainer.save_freq=0",
            "tracking.backends=[console]", f"trainer.output_dir={tmp_path}/out"]))
        logged, spans = record_steps(trainer)
        trainer.fit()
    finally:
        ray.shutdown()
    staleness = [logged[step]["rollout_corr/staleness/max"] for step in range(1, LEARN_STEPS + 1)]
    assert staleness == [0] + [1] * (LEARN_STEPS - 1), "the bound is one version, and every prefetch reaches it"
    # Steps 1 .. N-1 each start the next step's generation on the rollout thread before their own update ends.
    update_end = {step: end for what, step, _, _, end in spans if what == "update"}
    prefetched = sorted(step for what, step, thread, start, _ in spans
                        if what == "generate" and thread.startswith("rollout") and start < update_end[step])
    assert prefetched == list(range(1, LEARN_STEPS))
    (_, before), (_, after) = trainer.val_history[0], trainer.val_history[-1]
    before, after = before["val/arithmetic/acc"], after["val/arithmetic/acc"]
    assert after - before >= MIN_GAIN, f"held-out accuracy {before:.3f} -> {after:.3f}"


def record_steps(trainer):
    """The metrics each step logs, and (what, step, thread, start, end) of every generation and update."""
    logged, spans = {}, []
    log, update, generate = trainer.tracking.log_metrics, trainer.update_policy, trainer.actor_rollout.generate

    def timed(what, method, *args):
        step, start = trainer.global_step, time.perf_counter()
        result = method(*args)
        spans.append((what, step, threading.current_thread().name, start, time.perf_counter()))
        return result

    def record_log(metrics, step):
        logged.setdefault(step, {}).update(metrics)
        log(metrics, step=step)

    trainer.tracking.log_metrics = record_log
    trainer.update_policy = lambda batch: timed("update", update, batch)
    trainer.actor_rollout.generate = lambda prompts, params: timed("generate", generate, prompts, params)
    return logged, spans
