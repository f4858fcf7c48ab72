"""A step's reward from every source that is on: the rule scorer's, the reward model's, the judge's, weighted by
`reward.weights` (core/reward/mixing.py) into one `token_level_scores` on each response's last token."""

from __future__ import annotations

import torch

from core.batch import Batch
from core.reward.manager import place_on_last_token
from core.reward.mixing import mix_scores, source_metrics, source_weights
from core.trainer.reward_model_worker import RM_SCORES


class RewardSources:
    """`reward_model`: a `RewardModelWorker` (or a Ray group's with its method); `judge`: a `JudgeWorker`; None
    where that source is off."""

    def __init__(self, reward_cfg, tokenizer, reward_model=None, judge=None):
        self.weights, self.tokenizer = source_weights(reward_cfg), tokenizer
        self.reward_model, self.judge = reward_model, judge

    @property
    def only_rule(self) -> bool:
        """The rule's score as it is: nothing to add, nothing to scale."""
        return self.weights == {"rule": 1.0}

    def mixed(self, batch: Batch, rule_scores: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
        """(B, T_resp) mixed token_level_scores from the rule's (B, T_resp) ones, and per-source metrics."""
        scores, metrics = {"rule": rule_scores.sum(-1)}, {}  # (B,): the rule's score sits on the last token
        if "model" in self.weights:
            scores["model"] = self.reward_model.compute_rm_scores(batch)[RM_SCORES]
        if "judge" in self.weights:
            scores["judge"], metrics = self.judge.score(self.response_texts(batch), list(batch["raw_prompt"]),
                                                        list(batch["ground_truth"]))
        weights = {source: weight for source, weight in self.weights.items() if source in scores}
        mixed = mix_scores(scores, weights)
        return place_on_last_token(mixed, batch["response_mask"]), metrics | source_metrics(scores)

    def close(self) -> None:
        """Stop a reward model's Ray actors of its own (`reward.model.placement=separate`)."""
        if hasattr(self.reward_model, "close"):
            self.reward_model.close()

    def response_texts(self, batch: Batch) -> list[str]:
        ids = [row[mask.bool()].tolist() for row, mask in zip(batch["responses"], batch["response_mask"])]
        return self.tokenizer.batch_decode(ids, skip_special_tokens=True)
