"""One PPO step under torchrun (the local controller); rank 0 saves the step's update metrics.

`torchrun --nproc_per_node 2 ppo_step.py OUT override...`: tests/test_ray_controller.py compares them,
and the checkpoint this run writes, with the same step taken by 2 Ray workers.
"""

import sys

import torch

from core.config import load_config
from recipes.ppo.trainer import PPOTrainer


def record_update_metrics(trainer) -> dict:
    """{stage: metrics} of the critic and actor updates, filled in as `trainer.fit()` runs."""
    seen = {}

    def spy(stage: str):
        update = getattr(trainer, stage)

        def recorded(batch):
            seen[stage] = update(batch)
            return seen[stage]
        return recorded

    for stage in ("update_critic", "update_policy"):
        setattr(trainer, stage, spy(stage))
    return seen


if __name__ == "__main__":
    out, overrides = sys.argv[1], sys.argv[2:]
    trainer = PPOTrainer(load_config("ppo", overrides))
    metrics = record_update_metrics(trainer)
    trainer.fit()
    if trainer.world.is_main:
        torch.save(metrics, out)
