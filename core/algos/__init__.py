"""Pure, registered algorithm pieces: advantages, policy and value losses, KL, aggregation, the
off-policy correction's importance weights, and DAPO's sampling filter and reward shaping.
(Log-probs and entropy come from the engine's chunked head, `core.engine.logprob_head`.)"""

from core.algos.advantages import (
    ADV_ESTIMATORS,
    gae_advantages,
    group_indices,
    grpo_advantages,
    reinforce_plus_plus_advantages,
    remax_advantages,
    rloo_advantages,
)
from core.algos.aggregation import AGG_MODES, aggregate_loss, global_normalisers
from core.algos.dapo import overlong_penalty, uniform_groups
from core.algos.kl import KL_ESTIMATORS, kl_penalty
from core.algos.policy_loss import POLICY_LOSSES, masked_mean, ppo_clip_loss
from core.algos.registry import Registry
from core.algos.rollout_correction import ROLLOUT_CORRECTIONS, rollout_correction_weights
from core.algos.stats import masked_whiten
from core.algos.value_loss import clipped_value_loss

__all__ = [
    "ADV_ESTIMATORS",
    "AGG_MODES",
    "KL_ESTIMATORS",
    "POLICY_LOSSES",
    "ROLLOUT_CORRECTIONS",
    "Registry",
    "aggregate_loss",
    "clipped_value_loss",
    "gae_advantages",
    "global_normalisers",
    "group_indices",
    "grpo_advantages",
    "kl_penalty",
    "masked_mean",
    "masked_whiten",
    "overlong_penalty",
    "ppo_clip_loss",
    "reinforce_plus_plus_advantages",
    "remax_advantages",
    "rloo_advantages",
    "rollout_correction_weights",
    "uniform_groups",
]
