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
    ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)


def tiny_run(model_dir, out, *extra):
    """A few fast GRPO steps on the random model, every step changing the weights."""
    reward = out.parent / "varied_reward.py"
    reward.write_text(VARIED_REWARD)
    return load_config("grpo", [
        f"model.path={model_dir}", "trainer.test_freq=0", "data.train_batch_size=4", "actor.ppo_mini_batch_size=2",
        "rollout.n=2", "data.max_response_length=6", "tracking.backends=[console]", "actor.lr=0.01",
        f"reward.custom_function.path={reward}", f"trainer.output_dir={out}", *DISAGGREGATED, *extra])


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
        config = tiny_run(random_model_dir, tmp_path_factory.mktemp("synced") / "out", "trainer.total_steps=2",
                          "trainer.n_gpus_per_node=2", "trainer.rollout_workers=2", "trainer.save_freq=0")
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
