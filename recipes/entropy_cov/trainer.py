"""Clip-Cov and KL-Cov (Cui et al. 2025, arXiv:2505.22617): GRPO whose loss restrains the few tokens whose
log-prob and advantage covary most, the tokens that drive entropy collapse.

The loop changes in one place: after the advantages, the trainer picks those tokens once for the whole
step batch (`cov_selected`), so the loss of a mini-batch does not depend on its micro-batch split (verl
picks them inside each micro-batch). The pick reads the rollout policy's log-probs, so π_old is always
computed before the update.
"""

from __future__ import annotations

import torch

from core.algos.entropy_cov import clip_cov_selection, kl_cov_selection
from recipes.grpo.trainer import GRPOTrainer


class CovTrainer(GRPOTrainer):
    def old_log_probs_from_update(self, batch) -> int:
        return 0  # the pick needs π_old's log-probs of every row before the update starts

    def compute_advantages(self, batch):
        batch = super().compute_advantages(batch)
        actor = self.config.actor
        inputs = (batch["advantages"], batch["old_log_probs"], batch["response_mask"])
        if actor.policy_loss == "clip_cov":
            # Reproducible draws per (run seed, data position, dp rank), like the rollout's seeds.
            seed = self.config.trainer.seed * 1_000_003 + self.train_loader.offset * 97 + self.world.dp_rank
            generator = torch.Generator().manual_seed(seed)
            selected = clip_cov_selection(*inputs, ratio=actor.clip_cov_ratio, lower=actor.clip_cov_lb,
                                          upper=actor.clip_cov_ub, generator=generator)
        elif actor.policy_loss == "kl_cov":
            selected = kl_cov_selection(*inputs, ratio=actor.kl_cov_ratio)
        else:
            raise ValueError(f"CovTrainer runs actor.policy_loss=clip_cov or kl_cov, got {actor.policy_loss!r}; "
                             "use recipes.grpo.trainer.GRPOTrainer for other losses")
        batch.tensors["cov_selected"] = selected  # (B, T_resp) bool
        return batch
