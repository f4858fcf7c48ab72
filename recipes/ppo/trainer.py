"""PPO (Schulman et al. 2017) with GAE (Schulman et al. 2016): a learned critic is the baseline.

The base loop already computes GAE advantages and returns when `algorithm.adv_estimator=gae` and
the batch carries `values`; this subclass asks for the critic role that supplies them and learns
from the returns (the controller builds it beside the actor), and holds the actor back for the
first `trainer.critic_warmup` steps so the policy is not steered by an untrained value head.
"""

from __future__ import annotations

from core.batch import Batch
from core.trainer.base import BaseTrainer


class PPOTrainer(BaseTrainer):
    uses_critic = True

    def __init__(self, config):
        if config.algorithm.adv_estimator != "gae":
            raise ValueError(f"PPO learns a critic for GAE: set algorithm.adv_estimator=gae "
                             f"(got {config.algorithm.adv_estimator!r}), or use a critic-free recipe")
        super().__init__(config)

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
