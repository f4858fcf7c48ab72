"""Reward manager: decode responses, score each with its data source's scorer, place the score.

Outcome rewards live on the LAST valid response token of a (B, T_resp) `token_level_scores`
tensor (verl's convention), so token-level code (KL in reward, GAE, returns) and sequence-level
code (`token_level_scores.sum(-1)` in GRPO/RLOO) both see it.

The three steps are separate methods so a later manager can swap `score_texts` for a process pool
with per-sample timeouts without touching decoding or placement.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from core.data.batch import Batch, BatchContractError
from core.reward import gsm8k

# A scorer maps (response_text, ground_truth) to a float, or to a dict with "score" and optionally
# "acc". By convention a float of 1.0 is the full score; scorers on another scale return "acc".
Scorer = Callable[[str, Any], "float | dict"]

# data_source -> scorer. "arithmetic" is the embedded synthetic task: its answers use `#### N`.
DEFAULT_SCORERS: dict[str, Scorer] = {
    "gsm8k": gsm8k.compute_score,
    "openai/gsm8k": gsm8k.compute_score,
    "arithmetic": gsm8k.compute_score,
}
FULL_SCORE = 1.0


class RewardManager:
    """Turn a rollout batch into `token_level_scores` (B, T_resp) and per-row score/acc info.

    `scorers` extends (or overrides) `DEFAULT_SCORERS`. `default_scorer`, when given, scores data
    sources missing from the table; when None an unknown data source is an error, because silently
    scoring it with the wrong rule would corrupt a run without any visible failure.
    """

    def __init__(self, tokenizer, scorers: dict[str, Scorer] | None = None, default_scorer: Scorer | None = None):
        self.tokenizer = tokenizer
        self.scorers = {**DEFAULT_SCORERS, **(scorers or {})}
        self.default_scorer = default_scorer

    def __call__(self, batch: Batch) -> tuple[torch.Tensor, dict]:
        responses, response_mask = self._response_tensors(batch)
        texts = self.decode_responses(responses, response_mask)
        data_sources = _non_tensor(batch, "data_source")
        ground_truths = _non_tensor(batch, "ground_truth")
        results = self.score_texts(texts, list(data_sources), list(ground_truths))
        scores = [r["score"] for r in results]
        token_level_scores = place_on_last_token(torch.tensor(scores, dtype=torch.float32), response_mask)
        info = {"score": scores, "acc": [r["acc"] for r in results]}
        return token_level_scores, info

    # ---- steps --------------------------------------------------------------------------------
    def decode_responses(self, responses: torch.Tensor, response_mask: torch.Tensor) -> list[str]:
        # Only masked-in tokens: padding (and any tokens a multi-turn rollout masked out) are not
        # part of what the model answered.
        ids = [row[mask.bool()].tolist() for row, mask in zip(responses, response_mask)]
        return self.tokenizer.batch_decode(ids, skip_special_tokens=True)

    def score_texts(self, texts: list[str], data_sources: list[str], ground_truths: list) -> list[dict]:
        """One {"score": float, "acc": float} per row, in order."""
        return [
            _normalize(self.scorer_for(source)(text, truth))
            for text, source, truth in zip(texts, data_sources, ground_truths)
        ]

    def scorer_for(self, data_source: str) -> Scorer:
        scorer = self.scorers.get(data_source, self.default_scorer)
        if scorer is None:
            raise ValueError(
                f"RewardManager: no scorer for data_source {data_source!r}; known data sources are "
                f"{sorted(self.scorers)}. Register one with RewardManager(scorers={{{data_source!r}: fn}}) "
                f"or set reward.custom_function.path/name."
            )
        return scorer

    @staticmethod
    def _response_tensors(batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        for key in ("responses", "response_mask"):
            if key not in batch.tensors:
                raise BatchContractError(f"[reward] batch has no tensor {key!r}; the rollout must produce it")
        responses, response_mask = batch["responses"], batch["response_mask"]
        if responses.shape != response_mask.shape or responses.dim() != 2:
            raise BatchContractError(
                f"[reward] 'responses' {tuple(responses.shape)} and 'response_mask' "
                f"{tuple(response_mask.shape)} must both be (B, T_resp)"
            )
        return responses, response_mask


def place_on_last_token(scores: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """(B,) scores -> (B, T_resp) float32, each on its row's last valid token.

    A row with an empty response (mask all zero) gets its score at position 0, not at -1 as in
    verl: position 0 keeps the row's sequence reward (the sum over T_resp) intact, and no
    token-level term is trained on it since the mask there is 0.
    """
    positions = torch.arange(response_mask.shape[1], device=response_mask.device)  # (T_resp,)
    last = torch.where(response_mask.bool(), positions, -1).max(dim=1).values.clamp(min=0)  # (B,)
    token_level_scores = torch.zeros(response_mask.shape, dtype=torch.float32, device=response_mask.device)
    token_level_scores[torch.arange(len(last)), last] = scores.to(token_level_scores)
    return token_level_scores


def _normalize(result) -> dict:
    if isinstance(result, dict):
        if "score" not in result:
            raise ValueError(f"RewardManager: a scorer returned a dict without 'score': {sorted(result)}")
        score = float(result["score"])
        return {"score": score, "acc": float(result.get("acc", score == FULL_SCORE))}
    score = float(result)
    return {"score": score, "acc": float(score == FULL_SCORE)}


def _non_tensor(batch: Batch, key: str):
    if key not in batch.non_tensors:
        raise BatchContractError(
            f"[reward] batch has no non-tensor {key!r} (it has {sorted(batch.non_tensors)}); "
            f"collate_prompts puts it there and the rollout must carry it through"
        )
    return batch.non_tensors[key]
