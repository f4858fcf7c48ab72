"""`reward.model.placement=separate` under Ray: the reward model on devices of its own, `reward.model.num_workers`
actors, each a full copy (a one-rank FSDP group) scoring a contiguous share of the batch, in parallel.

Its weights stay on its devices (no offload: nothing else runs there), and the policy's devices hold no copy of
it, which suits a reward model as large as the policy.
"""

from __future__ import annotations

import ray
import torch
from omegaconf import OmegaConf

from core.batch import Batch
from core.engine.distributed import init_distributed
from core.trainer.ray_controller import WORKER_RUNTIME_ENV, connect_ray, contiguous_parts, kill_and_wait
from core.trainer.reward_model_worker import RewardModelWorker


@ray.remote
class RewardModelActor:
    def __init__(self, config_container: dict, tokenizer):
        config = OmegaConf.create(config_container)
        torch.set_num_threads(1)
        self.worker = RewardModelWorker(config, init_distributed(config.trainer.device), tokenizer, offload=False)

    def compute_rm_scores(self, batch: Batch) -> Batch:
        return self.worker.compute_rm_scores(batch)


class RayRewardModelGroup:
    """`RewardModelWorker`'s interface over actors of their own."""

    def __init__(self, config, tokenizer):
        connect_ray()
        gpus = 1 if config.trainer.device != "cpu" and ray.cluster_resources().get("GPU", 0) else 0
        container = OmegaConf.to_container(config, resolve=True)
        options = dict(num_cpus=1, num_gpus=gpus, runtime_env=WORKER_RUNTIME_ENV)
        self.workers = [RewardModelActor.options(**options).remote(container, tokenizer)
                        for _ in range(config.reward.model.num_workers)]
        try:
            ray.get([worker.__ray_ready__.remote() for worker in self.workers])
        except BaseException:
            self.close()
            raise

    def compute_rm_scores(self, batch: Batch) -> Batch:
        parts = contiguous_parts(batch, len(self.workers))
        refs = [worker.compute_rm_scores.remote(part) for worker, part in zip(self.workers, parts) if len(part)]
        return Batch.concat(ray.get(refs))

    def close(self) -> None:
        kill_and_wait(self.workers)
        self.workers = []
