"""Pure, registered algorithm pieces: advantages, policy losses, KL, aggregation, entropy."""

from core.algos.advantages import ADV_ESTIMATORS, grpo_advantages, group_indices
from core.algos.aggregation import AGG_MODES, aggregate_loss, global_normalisers
from core.algos.entropy import entropy_from_logits, log_probs_from_logits
from core.algos.kl import KL_ESTIMATORS, kl_penalty
from core.algos.policy_loss import POLICY_LOSSES, masked_mean, ppo_clip_loss
from core.algos.registry import Registry

__all__ = [
    "ADV_ESTIMATORS",
    "AGG_MODES",
    "KL_ESTIMATORS",
    "POLICY_LOSSES",
    "Registry",
    "aggregate_loss",
    "entropy_from_logits",
    "global_normalisers",
    "group_indices",
    "grpo_advantages",
    "kl_penalty",
    "log_probs_from_logits",
    "masked_mean",
    "ppo_clip_loss",
]
