"""The actor objective: L = L_pg − entropy_coeff·H + kl_loss_coef·KL (DESIGN.md §4).

`make_actor_loss` binds an actor config to a loss function with the training engine's signature
(log_probs, entropy, micro_batch, num_tokens, num_seqs) -> (loss, metrics), so the engine stays
ignorant of which algorithm runs.
"""

from __future__ import annotations

import torch

from core.algos.aggregation import aggregate_loss, local_loss_value
from core.algos.kl import kl_penalty
from core.algos.logprob_drift import LogprobDrift
from core.algos.policy_loss import POLICY_LOSSES

# (B,) bool: rows whose π_old is the update's own first forward (BaseTrainer.old_log_probs_from_update): that
# optimizer step runs on the weights π_old stands for, so no forward before the update is needed for them.
OLD_FROM_UPDATE = "old_log_probs_from_update"


def make_actor_loss(actor_cfg, max_response_length: int, track_logprob_drift: bool = False):
    """`track_logprob_drift`: where this forward is π_old for the whole micro-batch (no old_log_probs given), add
    |π_old − π_rollout| of its tokens to `actor_loss.logprob_drift` (LogprobDrift), which the caller pops after
    the update. Only with rollout log-probs worth comparing (rollout.calculate_log_probs)."""
    policy_loss = POLICY_LOSSES.get(actor_cfg.policy_loss)
    agg = dict(loss_agg_mode=actor_cfg.loss_agg_mode, max_response_length=max_response_length)
    drift = LogprobDrift()

    def actor_loss(log_probs, entropy, micro, num_tokens, num_seqs):
        mask = micro["response_mask"]
        normalisers = dict(num_tokens=num_tokens, num_seqs=num_seqs, **agg)
        # No old_log_probs (or rows marked OLD_FROM_UPDATE): the trainer skipped their forward because this is
        # the first optimizer step on them, so π_old is the current forward itself (ratio 1, its gradient intact).
        old_log_probs = micro["old_log_probs"] if "old_log_probs" in micro else log_probs.detach()
        if track_logprob_drift and "old_log_probs" not in micro and "rollout_log_probs" in micro:
            drift.add(old_log_probs, micro["rollout_log_probs"], mask)
        if OLD_FROM_UPDATE in micro.tensors:
            old_log_probs = torch.where(micro[OLD_FROM_UPDATE].unsqueeze(-1), log_probs.detach(), old_log_probs)
        pg_loss, pg_metrics = policy_loss(
            log_probs, old_log_probs, micro["advantages"], mask,
            clip_ratio_low=actor_cfg.clip_ratio_low, clip_ratio_high=actor_cfg.clip_ratio_high,
            clip_ratio_c=actor_cfg.clip_ratio_c, token_weights=micro.tensors.get("rollout_is_weights"),
            kl_cov_coef=actor_cfg.kl_cov_coef,
            # Clip-Cov/KL-Cov's tokens, picked once per step over the whole batch (see entropy_cov.py).
            cov_selected=micro.tensors.get("cov_selected"), **normalisers,
        )
        entropy_loss = _aggregate(entropy, mask, normalisers)
        loss = pg_loss - actor_cfg.entropy_coeff * entropy_loss

        def report(share):
            return local_loss_value(share.item(), mask, actor_cfg.loss_agg_mode,
                                    num_tokens=num_tokens, num_seqs=num_seqs)

        metrics = {f"actor/{k}": v for k, v in pg_metrics.items()}
        metrics["actor/pg_loss"] = report(pg_loss)
        metrics["actor/entropy"] = report(entropy_loss)
        if actor_cfg.use_kl_loss:
            kl = kl_penalty(log_probs, micro["ref_log_probs"], actor_cfg.kl_loss_type)
            kl_loss = _aggregate(kl, mask, normalisers)
            loss = loss + actor_cfg.kl_loss_coef * kl_loss
            metrics["actor/kl_loss"] = report(kl_loss)
        return loss, metrics

    # With no entropy bonus the engine skips the entropy's backward (it is still reported).
    actor_loss.needs_entropy_grad = actor_cfg.entropy_coeff != 0
    actor_loss.logprob_drift = drift
    return actor_loss


def _aggregate(values, mask, normalisers):
    return aggregate_loss(values, mask, normalisers["loss_agg_mode"], num_tokens=normalisers["num_tokens"],
                          num_seqs=normalisers["num_seqs"],
                          max_response_length=normalisers["max_response_length"])
