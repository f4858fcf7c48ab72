"""Pure, registered algorithm pieces: advantages, policy and value losses, KL, aggregation, the
off-policy correction's importance weights, DAPO's sampling filter and reward shaping, and Clip-Cov/KL-Cov's
token selection. (Log-probs and entropy come from the engine's chunked head, `core.engine.logprob_head`.)"""

from core.algos.advantages import (
    ADV_ESTIMATORS,
    SEQUENCE_LEVEL_ESTIMATORS,
    gae_advantages,
    gpg_advantages,
    group_indices,
    grpo_advantages,
    grpo_passk_advantages,
    opo_advantages,
    reinforce_plus_plus_advantages,
    reinforce_plus_plus_baseline_advantages,
    remax_advantages,
    rloo_advantages,
)
from core.algos.aggregation import AGG_MODES, aggregate_loss, global_normalisers
from core.algos.dapo import overlong_penalty, uniform_groups
from core.algos.entropy_cov import COV_LOSSES, clip_cov_loss, clip_cov_selection, kl_cov_loss, kl_cov_selection
from core.algos.importance_losses import SEQUENCE_LEVEL_LOSSES, cispo_loss, gpg_loss, gspo_loss
from core.algos.kl import KL_ESTIMATORS, kl_penalty
from core.algos.policy_loss import POLICY_LOSSES, masked_mean, ppo_clip_loss
from core.algos.registry import Registry
from core.algos.rollout_correction import ROLLOUT_CORRECTIONS, rollout_correction_weights
from core.algos.stats import masked_whiten
from core.algos.value_loss import clipped_value_loss

__all__ = [
    "ADV_ESTIMATORS",
    "AGG_MODES",
    "COV_LOSSES",
    "KL_ESTIMATORS",
    "POLICY_LOSSES",
    "ROLLOUT_CORRECTIONS",
    "Registry",
    "SEQUENCE_LEVEL_ESTIMATORS",
    "SEQUENCE_LEVEL_LOSSES",
    "aggregate_loss",
    "cispo_loss",
    "clip_cov_loss",
    "clip_cov_selection",
    "clipped_value_loss",
    "gae_advantages",
    "global_normalisers",
    "gpg_advantages",
    "gpg_loss",
    "group_indices",
    "grpo_advantages",
    "grpo_passk_advantages",
    "gspo_loss",
    "kl_cov_loss",
    "kl_cov_selection",
    "kl_penalty",
    "masked_mean",
    "masked_whiten",
    "opo_advantages",
    "overlong_penalty",
    "ppo_clip_loss",
    "reinforce_plus_plus_advantages",
    "reinforce_plus_plus_baseline_advantages",
    "remax_advantages",
    "rloo_advantages",
    "rollout_correction_weights",
    "uniform_groups",
]
