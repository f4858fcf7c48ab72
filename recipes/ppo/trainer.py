"""PPO (Schulman et al. 2017) with GAE (Schulman et al. 2016): a learned critic is the baseline.

The base loop already computes GAE advantages and returns when `algorithm.adv_estimator=gae` and
the batch carries `values`; this subclass adds the critic role that supplies them and learns
from the returns, and holds the actor back for the first `trainer.critic_warmup` steps so the
policy is not steered by an untrained value head.
"""

from __future__ import annotations

import torch

from core.data.batch import Batch
from core.trainer.base import BaseTrainer
from core.trainer.workers import CriticWorker


class PPOTrainer(BaseTrainer):
    def __init__(self, config):
        if config.algorithm.adv_estimator != "gae":
            raise ValueError(f"PPO learns a critic for GAE: set algorithm.adv_estimator=gae "
                             f"(got {config.algorithm.adv_estimator!r}), or use a critic-free recipe")
        if config.trainer.controller == "ray":
            raise ValueError("PPO's critic has no Ray worker group yet: run PPO with trainer.controller=local "
                             "(one process, or torchrun for several GPUs)")
        super().__init__(config)
        # Re-seeded so every rank builds the same fresh value head, whatever ran before.
        torch.manual_seed(config.trainer.seed)
        self.critic = CriticWorker(config, self.world)

    def checkpoint_engines(self) -> dict:
        return {**super().checkpoint_engines(), "critic": self.critic.engine}

    def compute_values(self, batch: Batch) -> Batch:
        # V(s_t) under the critic that scored this rollout: GAE's baseline, then the loss's V_old.
        return batch.union(self.critic.compute_values(batch), stage="values")

    def update_critic(self, batch: Batch) -> dict[str, float]:
        return self.critic.update_critic(batch)

    def update_policy(self, batch: Batch) -> dict[str, float]:
        if self.global_step <= self.config.trainer.critic_warmup:
            return {}  # critic warm-up: only the value model learns from this rollout
        return super().update_policy(batch)
