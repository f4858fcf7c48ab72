"""Per-step metrics of a rollout batch, under verl's names so runs overlay (DESIGN.md §6)."""

from __future__ import annotations

import numpy as np
import torch

from core.batch import Batch
from core.rollout.multi_turn.episode_metrics import multi_turn_metrics


def _stats(prefix: str, values: torch.Tensor) -> dict[str, float]:
    values = values.float()
    return {f"{prefix}/mean": values.mean().item(), f"{prefix}/max": values.max().item(),
            f"{prefix}/min": values.min().item()}


def data_metrics(batch: Batch, max_response_length: int) -> dict[str, float]:
    mask = batch["response_mask"].bool()  # (B, T_resp)
    lengths = mask.sum(-1)
    valid_advantages = batch["advantages"][mask]
    metrics = {
        **_stats("critic/score", batch["token_level_scores"].sum(-1)),
        **_stats("critic/rewards", batch["token_level_rewards"].sum(-1)),
        **_stats("critic/advantages", valid_advantages if valid_advantages.numel() else torch.zeros(1)),
        **_stats("response_length", lengths),
        **_stats("prompt_length", batch["attention_mask"][:, : batch["prompts"].shape[1]].sum(-1)),
        "response_length/clip_ratio": (lengths >= max_response_length).float().mean().item(),
    }
    if "acc" in batch.non_tensors:
        metrics["critic/acc/mean"] = float(batch["acc"].astype(float).mean())
    return metrics | multi_turn_metrics(batch.non_tensors)


def throughput_metrics(batch: Batch, step_seconds: float) -> dict[str, float]:
    """This rank's tokens (prompt + response) and tokens per second: per device, as verl reports."""
    tokens = batch["attention_mask"].sum().item()
    return {
        "perf/total_num_tokens": tokens,
        "rollout/generated_tokens": batch["response_mask"].sum().item(),
        "perf/throughput": tokens / max(step_seconds, 1e-9),
    }


# Counts that add up over ranks; every other metric is averaged. `rollout/baseline_tokens`: tokens a recipe
# generates beside the trained samples (ReMax's greedy baseline), where it logs them.
SUMMED_OVER_RANKS = ("perf/total_num_tokens", "rollout/generated_tokens", "rollout/baseline_tokens",
                     "reward/error_count", "reward/timeout_count", "reward/judge/parse_failures")


def logprob_diff_metrics(batch: Batch) -> dict[str, float]:
    """|rollout − training| log-probs of the sampled tokens: the engines disagree more than float noise
    when their numerics, sampling temperature or weights differ, and PPO's ratio then starts off 1."""
    mask = batch["response_mask"].bool()  # (B, T_resp)
    per_token = (batch["rollout_log_probs"] - batch["old_log_probs"]).abs()
    diff = per_token[mask]
    if diff.numel() == 0:
        return {}
    metrics = {"rollout/logprob_diff/mean": diff.mean().item(), "rollout/logprob_diff/max": diff.max().item()}
    later = later_turn_tokens(mask)
    if later.any():  # multi-turn: a context rebuilt unlike what the engine saw shows in the later turns only
        metrics["rollout/logprob_diff/first_turn_mean"] = per_token[mask & ~later].mean().item()
        metrics["rollout/logprob_diff/later_turns_mean"] = per_token[later].mean().item()
    return metrics


def later_turn_tokens(mask: torch.Tensor) -> torch.Tensor:
    """Sampled tokens after the response's first unsampled token (a tool's observation): turns 2, 3, …; the
    right padding follows every sampled token, so it marks none."""
    gap = ~mask & (mask.long().cumsum(dim=1) > 0)
    return mask & (gap.long().cumsum(dim=1) > 0)


def staleness_metrics(staleness: np.ndarray, max_staleness: int) -> dict[str, float]:
    """How many weight versions old each row's rollout is, against the weights the step trains from:
    mean, max, and the fraction of rows at each staleness 0..max_staleness (a histogram)."""
    metrics = {"rollout_corr/staleness/mean": float(staleness.mean()),
               "rollout_corr/staleness/max": float(staleness.max())}
    for versions in range(max_staleness + 1):
        metrics[f"rollout_corr/staleness/frac_{versions}"] = float((staleness == versions).mean())
    return metrics
