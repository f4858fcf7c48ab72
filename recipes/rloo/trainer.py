"""RLOO (Ahmadian et al. 2024, "Back to Basics"): REINFORCE with a leave-one-out group baseline.

A_i = r_i − mean_{j≠i} r_j over the n samples of a prompt, with the KL to the reference policy
subtracted from the token rewards (`algorithm.use_kl_in_reward=true`) instead of a KL loss term.
The base loop already does all of it when `algorithm.adv_estimator=rloo`; this subclass gives the
recipe a named trainer and checks that groups exist.
"""

from __future__ import annotations

from core.trainer.base import BaseTrainer


class RLOOTrainer(BaseTrainer):
    def compute_advantages(self, batch):
        if self.config.rollout.n < 2:
            # A leave-one-out mean needs at least one other sample of the same prompt.
            raise ValueError(f"RLOO needs rollout.n >= 2 samples per prompt for its leave-one-out "
                             f"baseline; got rollout.n={self.config.rollout.n}")
        return super().compute_advantages(batch)
