"""ReMax (Li et al. 2023): REINFORCE whose baseline is the reward of the greedy response.

For every prompt the rollout also decodes one greedy response (temperature 0), in the samples' engine
call (`SamplingParams.greedy_baseline`). It is scored but never trained on; its reward b_i becomes the
baseline of the prompt's n sampled responses:
A_t = Σ_{t'≥t} r_{t'} − b_i, the token rewards carrying the KL penalty (KL in the reward).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from core.algos.advantages import ADV_ESTIMATORS
from core.rollout.base import split_greedy_baselines
from core.trainer.base import BaseTrainer


class ReMaxTrainer(BaseTrainer):
    def __init__(self, config):
        if config.algorithm.adv_estimator != "remax":
            # The greedy rollout below only pays off as the remax estimator's baseline.
            raise ValueError(f"ReMaxTrainer needs algorithm.adv_estimator=remax; got "
                             f"{config.algorithm.adv_estimator!r} (use another recipe for that estimator)")
        super().__init__(config)

    def generate(self, prompts, params=None):
        params = params or self.sampling_params()
        # The n sampled responses per prompt (the ones trained on) and one greedy response each, in one rollout
        # call: an engine that batches both (vLLM) decodes the greedy ones beside the samples.
        batch, greedy = split_greedy_baselines(super().generate(prompts, replace(params, greedy_baseline=True)))
        greedy_scores, _ = self.reward_manager(greedy)  # task score only: the baseline has no KL term
        # Generated but never trained on: logged apart, so a step's generation speed counts them.
        self.step_metrics["rollout/baseline_tokens"] = greedy["response_mask"].sum().item()
        # Matched by uid (the prompt's group), not by position, so the alignment cannot drift.
        baseline_of = dict(zip(greedy["uid"], greedy_scores.sum(-1).tolist()))
        batch.tensors["baselines"] = torch.tensor([baseline_of[uid] for uid in batch["uid"]],
                                                  dtype=torch.float32)  # (B,)
        return batch

    def compute_advantages(self, batch):
        algo = self.config.algorithm
        advantages, returns = ADV_ESTIMATORS.get("remax")(
            token_level_rewards=batch["token_level_rewards"], response_mask=batch["response_mask"],
            group_ids=batch["uid"], baselines=batch["baselines"], gamma=algo.gamma, lam=algo.lam,
        )
        batch.tensors["advantages"], batch.tensors["returns"] = advantages, returns
        return batch

    def log_step(self, step, batch, metrics):
        super().log_step(step, batch, {**metrics, "critic/baseline/mean": batch["baselines"].mean().item()})
