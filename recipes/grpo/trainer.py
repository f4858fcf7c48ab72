"""GRPO (Shao et al. 2024, DeepSeekMath): group-normalised outcome advantages, no critic.

The base loop already is GRPO when `algorithm.adv_estimator=grpo`; this subclass exists so the
recipe has a named trainer and a place for GRPO-only hooks. Dr.GRPO is the config variant
`algorithm.norm_adv_by_std_in_grpo=false actor.loss_agg_mode=seq-mean-token-sum-norm`.
"""

from __future__ import annotations

from core.trainer.base import BaseTrainer


class GRPOTrainer(BaseTrainer):
    def compute_advantages(self, batch):
        if self.config.rollout.n < 2:
            raise ValueError(f"GRPO needs rollout.n >= 2 samples per prompt to form groups; got {self.config.rollout.n}")
        return super().compute_advantages(batch)
