"""DAPO (Yu et al. 2025): dynamic sampling and overlong reward shaping on top of the GRPO loop.

The loss-side changes are config (clip-higher 0.2/0.28, dual-clip c=10, token-mean, no KL). The
data-side ones are the two hooks below: `generate` keeps sampling prompt batches until
`data.train_batch_size` groups have non-uniform scores, and `compute_rewards` adds the overlong
penalty to each response's last-token score.
"""

from __future__ import annotations

import itertools

import numpy as np

from core.algos.advantages import group_indices
from core.algos.dapo import overlong_penalty, uniform_groups
from core.batch import Batch
from core.engine.distributed import all_reduce_sum
from core.reward.manager import place_on_last_token
from core.rollout.base import concat_rollouts
from core.trainer.base import BaseTrainer


class DAPOTrainer(BaseTrainer):
    samples_dynamically = True

    def generate(self, prompts: Batch, params=None) -> Batch:
        filter_groups = self.config.algorithm.filter_groups
        if not filter_groups.enable:
            return super().generate(prompts, params)
        target = len(prompts)  # this rank's share of data.train_batch_size, in groups
        kept, num_kept, num_generated = [], 0, 0
        cap = filter_groups.max_num_gen_batches  # 0: no cap, sample until the batch is full (verl's endless trials)
        for round_ in itertools.count(1):
            if num_kept < target:
                batch = super().compute_rewards(super().generate(prompts))
                # A prompt drawn again in a later round must not merge with its earlier group.
                batch.non_tensors["uid"] = np.array([f"{round_}:{uid}" for uid in batch["uid"]], dtype=object)
                # Filter on the task scores, before overlong shaping (added in compute_rewards): a
                # group that is all right or all wrong teaches nothing, whatever its lengths.
                keep = ~uniform_groups(batch["token_level_scores"].sum(-1), batch["uid"])  # (B,)
                kept.append(batch.select(keep))
                num_kept += len(group_indices(batch["uid"][keep]))
                num_generated += target
            # Every rank draws the same number of batches, so the loaders stay in step.
            if all_reduce_sum(float(num_kept < target), self.world.device) == 0:
                break
            if round_ == cap:
                raise RuntimeError(
                    f"DAPO dynamic sampling: after algorithm.filter_groups.max_num_gen_batches="
                    f"{round_} generation rounds ({num_generated} prompts on this rank) only {num_kept} of "
                    f"{target} prompt groups had non-uniform scores; the others were all right or all "
                    f"wrong. Raise algorithm.filter_groups.max_num_gen_batches (0: no limit), or check that "
                    f"the task is neither too easy nor too hard for the model (critic/score/mean)"
                )
            prompts = next(self.train_loader)
        self.step_metrics.update({"dapo/num_gen_batches": round_, "dapo/kept_group_ratio": num_kept / num_generated})
        batch = concat_rollouts(kept, self.tokenizer.pad_token_id)  # rounds differ in width
        rows = [row for group in group_indices(batch["uid"])[:target] for row in group]
        return batch.select(rows)  # exactly `target` groups; extra kept groups are dropped

    def compute_rewards(self, batch: Batch) -> Batch:
        if "token_level_scores" not in batch.tensors:  # scored here unless dynamic sampling did it
            batch = super().compute_rewards(batch)
        buffer = self.config.reward.overlong_buffer
        if buffer.enable:
            response_mask = batch["response_mask"]  # (B, T_resp)
            penalty = overlong_penalty(response_mask.sum(-1), self.config.data.max_response_length,
                                       buffer.len, buffer.penalty_factor)  # (B,) ≤ 0
            batch.tensors["token_level_scores"] = batch["token_level_scores"] + place_on_last_token(penalty, response_mask)
            self.step_metrics["dapo/overlong_penalty/mean"] = penalty.mean().item()
        return batch
