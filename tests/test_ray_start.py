"""The Ray controller's start: its workers set up side by side, every phase is recorded with the first step,
and a call ships each worker its own part of a batch, not the whole batch."""

import os
import pickle
from types import SimpleNamespace

import pytest
import torch

from core.batch import Batch
from core.trainer.start_record import PREFIX, slowest, start_line

ray = pytest.importorskip("ray", reason="Ray is not installed: pip install -c constraints-cpu.txt ray")

from core.config import load_config  # noqa: E402
from core.rollout.base import SamplingParams  # noqa: E402
from core.trainer.ray_controller import ACTOR, RayWorkerGroup, owned  # noqa: E402
from recipes.grpo.trainer import GRPOTrainer  # noqa: E402


def test_a_group_waits_for_its_slowest_worker_in_every_phase():
    assert slowest([{"a": 1.0, "b": 5.0}, {"a": 3.0}]) == {"a": 3.0, "b": 5.0}
    line = start_line({PREFIX + "ray_init": 5.06, PREFIX + "setup": 70.2, PREFIX + "total": 97.31})
    assert line == "[start] 97.3 s to the first step: ray_init 5.1 s | setup 70.2 s"


class PickledSize:
    """A fake actor handle: `call.remote` records how many bytes its arguments pickle to, as Ray ships them."""

    def __init__(self, sizes: list):
        self.call = SimpleNamespace(remote=lambda *args: sizes.append(len(pickle.dumps(args))) or len(args[2]))


def test_each_worker_is_sent_its_own_rows_not_the_whole_batch():
    batch = Batch({"input_ids": torch.zeros(64, 1024, dtype=torch.long)}, {"uid": [str(i) for i in range(64)]})
    whole = len(pickle.dumps(batch))
    assert len(pickle.dumps(batch.chunk(4)[0])) > 0.9 * whole  # why: a row slice pickles its whole storage
    assert torch.equal(owned(batch.chunk(4)[1])["input_ids"], batch["input_ids"][16:32])

    sizes = []
    group = RayWorkerGroup.__new__(RayWorkerGroup)
    group.num_workers, group.workers, group.pad_token_id = 4, [PickledSize(sizes) for _ in range(4)], 0
    group._gather = lambda role, refs: refs
    assert group.run_split(ACTOR, "compute_log_probs", batch) == [16] * 4
    assert len(sizes) == 4 and max(sizes) < 0.3 * whole, sizes


def test_generate_sends_each_worker_its_own_prompts(monkeypatch):
    batch = Batch({"input_ids": torch.zeros(64, 1024, dtype=torch.long)})
    sizes = []
    group = RayWorkerGroup.__new__(RayWorkerGroup)
    group.num_workers, group.workers, group.pad_token_id = 4, [PickledSize(sizes) for _ in range(4)], 0
    group._gather = lambda role, refs: refs
    monkeypatch.setattr("core.trainer.ray_controller.concat_rollouts", lambda parts, pad: parts)
    group.generate(batch, SamplingParams(n=1, max_new_tokens=4))
    assert len(sizes) == 4 and max(sizes) < 0.3 * len(pickle.dumps(batch)), sizes


def test_training_ranks_and_rollout_workers_set_up_side_by_side_and_the_start_is_logged(random_model_dir,
                                                                                        tmp_path):
    """Disaggregated, 2 training ranks and 1 rollout worker: the rollout worker's setup starts before the
    training ranks' ends (it once waited for them), every worker runs at nice 0, and the first step logs every
    phase."""
    ray.shutdown()
    # address="local": a cluster of its own, not one already running on the host (ray.init would join that)
    ray.init(address="local", num_cpus=3, include_dashboard=False, log_to_driver=False)
    try:
        trainer = GRPOTrainer(load_config("grpo", [
            f"model.path={random_model_dir}", "trainer.total_steps=1", "trainer.test_freq=0",
            "data.train_batch_size=4", "actor.ppo_mini_batch_size=2", "rollout.n=2", "data.max_response_length=6",
            "tracking.backends=[console]", f"trainer.output_dir={tmp_path}/out", "trainer.controller=ray",
            "trainer.placement=disaggregated", "trainer.n_gpus_per_node=2", "trainer.rollout_workers=1",
            "trainer.num_threads=1"]))
        windows = trainer.actor_rollout.setup_windows
        assert len(windows[ACTOR]) == 2 and len(windows["rollout"]) == 1
        workers = trainer.actor_rollout.workers + trainer.actor_rollout.rollout_workers
        niceness = ray.get([worker.__ray_call__.remote(lambda _: os.nice(0)) for worker in workers])
        assert niceness == [0, 0, 0], niceness  # Ray's default would be 15 (ray_controller.WORKER_RUNTIME_ENV)
        assert windows["rollout"][0][0] < min(ended for _, ended in windows[ACTOR]), windows
        logged = []
        trainer.tracking.log_metrics = lambda metrics, step: logged.append((step, metrics))
        trainer.fit()
    finally:
        ray.shutdown()
    (step, metrics), = logged
    phases = {key.removeprefix(PREFIX) for key in metrics if key.startswith(PREFIX)}
    assert step == 1 and {"ray_init", "workers", "setup", "dist_init", "actor_model", "actor_fsdp", "ref",
                          "rollout_engine", "weight_group", "first_sync", "roles", "total"} <= phases, phases
    assert metrics[PREFIX + "total"] >= metrics[PREFIX + "roles"] >= metrics[PREFIX + "setup"] > 0
