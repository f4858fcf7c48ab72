"""Reward manager: decode responses, score each with its data source's scorer, place the score.

Outcome rewards live on the LAST valid response token of a (B, T_resp) `token_level_scores`
tensor (verl's convention), so token-level code (KL in reward, GAE, returns) and sequence-level
code (`token_level_scores.sum(-1)` in GRPO/RLOO) both see it.

The three steps are separate methods so `PoolRewardManager` (core/reward/pool.py) swaps
`score_texts` for a process pool with per-sample timeouts without touching decoding or placement.
A scorer that raises scores 0 and is reported in `info["error"]`: one bad sample must not end a run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch

from core.batch import Batch, BatchContractError
from core.reward import gsm8k, mathverify, reasoning_gym
from core.reward.answer_formats import zero_reward_message
from core.reward.custom import CustomFunction

logger = logging.getLogger(__name__)

# A scorer maps (response_text, ground_truth) to a float, or to a dict with "score" and optionally
# "acc". By convention a float of 1.0 is the full score; scorers on another scale return "acc".
# A `CustomFunction` is called with verl's signature instead (data_source and extra_info too).
Scorer = Callable[[str, Any], "float | dict"]

# "arithmetic" and "calculator" are the embedded synthetic tasks: their answers use `#### N`.
GSM8K_SOURCES = ("gsm8k", "openai/gsm8k", "arithmetic", "calculator")
# "tool_arithmetic" (core/data/tool_arithmetic.py) asks for its exact integer in \boxed{}, as MATH does.
MATH_SOURCES = ("HuggingFaceH4/MATH-500", "math500", "lighteval/MATH", "DigitalLearningGmbH/MATH-lighteval",
                "aime24", "aime25", "amc23", "tool_arithmetic")
# data_source -> scorer.
DEFAULT_SCORERS: dict[str, Scorer] = {
    **{source: gsm8k.compute_score for source in GSM8K_SOURCES},
    **{source: mathverify.compute_score for source in MATH_SOURCES},
}
FULL_SCORE = 1.0
TIMEOUT_ERROR = "timeout:"  # info["error"] entries of timed-out rows start with this
MAX_FAILURE_WARNINGS = 5  # per manager; after that only reward/error_count shows failures


class RewardManager:
    """Turn a rollout batch into `token_level_scores` (B, T_resp) and per-row score/acc/error info.

    `scorers` extends (or overrides) `DEFAULT_SCORERS`. `default_scorer`, when given, scores data
    sources missing from the table; when None an unknown data source is an error, because silently
    scoring it with the wrong rule would corrupt a run without any visible failure.
    `custom_scorer`, when given, scores every data source (verl's custom_reward_function).
    """

    def __init__(self, tokenizer, scorers: dict[str, Scorer] | None = None, default_scorer: Scorer | None = None,
                 custom_scorer: CustomFunction | None = None):
        self.tokenizer = tokenizer
        self.scorers = {**DEFAULT_SCORERS, **(scorers or {})}
        self.default_scorer = default_scorer
        self.custom_scorer = custom_scorer
        self._warnings_left = MAX_FAILURE_WARNINGS
        self._first_batch_checked = False

    def __call__(self, batch: Batch) -> tuple[torch.Tensor, dict]:
        responses, response_mask = self._response_tensors(batch)
        texts = self.decode_responses(responses, response_mask)
        data_sources = list(_non_tensor(batch, "data_source"))
        ground_truths = list(_non_tensor(batch, "ground_truth"))
        extra_infos = batch.non_tensors.get("extra_info")  # optional: only custom functions read it
        extra_infos = list(extra_infos) if extra_infos is not None else None
        # A multi-turn environment's own reward(), where it has one, scores its episode; the scorer the rest.
        env_rewards = batch.non_tensors.get("env_reward")
        env_rewards = [None] * len(texts) if env_rewards is None else list(env_rewards)
        env_errors = batch.non_tensors.get("env_reward_error")
        env_errors = [None] * len(texts) if env_errors is None else list(env_errors)
        rows = [i for i, env in enumerate(env_rewards) if env is None]
        scored = iter(self.score_texts([texts[i] for i in rows], [data_sources[i] for i in rows],
                                       [ground_truths[i] for i in rows],
                                       [extra_infos[i] for i in rows] if extra_infos is not None else None)
                      if rows else [])
        results = [next(scored) if env is None else env_result(env, error)
                   for env, error in zip(env_rewards, env_errors)]
        scores = [r["score"] for r in results]
        token_level_scores = place_on_last_token(torch.tensor(scores, dtype=torch.float32), response_mask)
        info = {"score": scores, "acc": [r["acc"] for r in results], "error": [r["error"] for r in results]}
        self._warn_failures(data_sources, info["error"])
        # An environment's zeros are its own verdict, not a scorer that cannot read the answers: only scorer rows.
        self._warn_if_first_batch_scores_zero([texts[i] for i in rows], [data_sources[i] for i in rows],
                                              [scores[i] for i in rows], [info["error"][i] for i in rows])
        return token_level_scores, info

    # ---- steps --------------------------------------------------------------------------------
    def decode_responses(self, responses: torch.Tensor, response_mask: torch.Tensor) -> list[str]:
        # Only masked-in tokens: padding (and any tokens a multi-turn rollout masked out) are not
        # part of what the model answered.
        ids = [row[mask.bool()].tolist() for row, mask in zip(responses, response_mask)]
        return self.tokenizer.batch_decode(ids, skip_special_tokens=True)

    def score_texts(self, texts: list[str], data_sources: list[str], ground_truths: list,
                    extra_infos: list | None = None) -> list[dict]:
        """One {"score": float, "acc": float, "error": str | None} per row, in order."""
        extra_infos = extra_infos if extra_infos is not None else [None] * len(texts)
        scorers = [self.scorer_for(source) for source in data_sources]  # unknown source: fail before scoring
        return [
            score_row(scorer, text, truth, source, extra)
            for scorer, text, truth, source, extra in zip(scorers, texts, ground_truths, data_sources, extra_infos)
        ]

    def scorer_for(self, data_source: str) -> Scorer:
        if self.custom_scorer is not None:
            return self.custom_scorer
        scorer = self.scorers.get(data_source)
        if scorer is None and reasoning_gym.is_reasoning_gym(data_source):
            scorer = reasoning_gym.compute_score  # every reasoning-gym task: its own verifier
        scorer = scorer if scorer is not None else self.default_scorer
        if scorer is None:
            raise ValueError(
                f"RewardManager: no scorer for data_source {data_source!r}; known data sources are "
                f"{sorted(self.scorers)}. Register one with RewardManager(scorers={{{data_source!r}: fn}}) "
                f"or set reward.custom_function.path/name."
            )
        return scorer

    def scorer_name(self, data_source: str) -> str:
        """The function that scores `data_source`, as a user finds it: `file.py:name` or `module.function`."""
        scorer = self.scorer_for(data_source)
        if isinstance(scorer, CustomFunction):
            return f"{scorer.path}:{scorer.name}"
        function = getattr(scorer, "func", scorer)  # a functools.partial's function
        settings = ", ".join(f"{key}={value!r}" for key, value in (getattr(scorer, "keywords", None) or {}).items())
        name = f"{getattr(function, '__module__', '?')}.{getattr(function, '__qualname__', repr(function))}"
        return f"{name}({settings})" if settings else name

    def close(self) -> None:
        """Release scoring resources (the pool manager's processes); nothing to do in-process."""

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def _warn_if_first_batch_scores_zero(self, texts: list[str], data_sources: list[str], scores: list[float],
                                         errors: list[str | None]) -> None:
        # Only the first batch: a later all-zero batch can be honest (a hard step); on the first one it is most
        # often a reward that cannot read the model's answers. Rows whose scorer failed are warned of already.
        scored = [row for row, error in enumerate(errors) if error is None]
        if self._first_batch_checked or not scored:
            return
        self._first_batch_checked = True
        if any(scores[row] != 0.0 for row in scored):
            return
        texts, data_sources = [texts[row] for row in scored], [data_sources[row] for row in scored]
        names = sorted({self.scorer_name(source) for source in dict.fromkeys(data_sources)})
        logger.warning("[reward] %s", zero_reward_message(" and ".join(names), texts))

    def _warn_failures(self, data_sources: list[str], errors: list[str | None]) -> None:
        for source, error in zip(data_sources, errors):
            if error is None or self._warnings_left <= 0:
                continue
            self._warnings_left -= 1
            tail = "" if self._warnings_left else " (last warning; reward/error_count keeps counting)"
            logger.warning("reward scorer failed on data_source %r, scored 0: %s%s", source, error, tail)

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


def env_result(env_reward: float, error: str | None = None) -> dict:
    """An environment's score as a scorer's result: acc is whether it is the full score; `error`, why the
    environment could not score the episode (its score is then 0, counted in reward/error_count)."""
    return {"score": float(env_reward), "acc": float(error is None and env_reward >= FULL_SCORE), "error": error}


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


def score_row(scorer: Scorer, text: str, ground_truth, data_source: str, extra_info=None) -> dict:
    """{"score", "acc", "error"} for one response; a raising scorer gives 0 and its error, not an exception."""
    try:
        if isinstance(scorer, CustomFunction):
            result = scorer(data_source, text, ground_truth, extra_info=extra_info)
        else:
            result = scorer(text, ground_truth)
        return {**_normalize(result), "error": None}
    except KeyboardInterrupt:
        raise
    except BaseException as error:  # noqa: BLE001 (math_verify's TimeoutException is not an Exception)
        return failed_row(f"{type(error).__name__}: {error}")


def failed_row(error: str) -> dict:
    return {"score": 0.0, "acc": 0.0, "error": error[:300]}


def too_many_errors(manager, data_sources: list[str], info: dict, max_error_frac: float,
                    settings: tuple[str, str] = ("reward.max_error_frac", "reward.timeout_s")) -> str | None:
    """One line when more than `max_error_frac` of a batch's rows failed to score (raised or timed out),
    naming the function and the first error: scored 0, they would train the policy on noise (or, in an
    evaluation, read as a wrong answer). `manager`: the reward manager (a `RewardManager` names its scorer;
    any other callable, its class); `settings`: the names of the error-fraction and timeout knobs to advise."""
    errors = info.get("error") or []
    failed = [row for row, error in enumerate(errors) if error is not None]
    if len(failed) <= max_error_frac * len(errors):
        return None
    first, (frac_key, timeout_key) = failed[0], settings
    if str(errors[first]).startswith("environment"):  # a multi-turn environment scored the row (loop.env_reward)
        name = "of rollout.multi_turn.env"
    elif isinstance(manager, RewardManager):
        name = manager.scorer_name(data_sources[first])
    else:
        name = type(manager).__name__
    return (f"the reward function {name} failed on {len(failed)} of {len(errors)} rows of a batch, more than "
            f"{frac_key}={max_error_frac:g}; first error: {errors[first]} — fix the function (timeouts: "
            f"raise {timeout_key}), or raise {frac_key}")


def reward_metrics(info: dict) -> dict[str, float]:
    """Counts for the trainer to log: rows whose scorer failed (timeouts included), and timeouts."""
    errors = [e for e in info.get("error", []) if e is not None]
    return {
        "reward/error_count": float(len(errors)),
        "reward/timeout_count": float(sum(e.startswith(TIMEOUT_ERROR) for e in errors)),
    }


def _normalize(result) -> dict:
    if isinstance(result, dict):
        if "score" not in result:
            raise ValueError(f"the scorer returned a dict without 'score' (keys {sorted(result)}); return "
                             f"a float or {{'score': float, 'acc': float}}")
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
