"""Per-step metrics of a rollout batch, under verl's names so runs overlay (DESIGN.md §6)."""

from __future__ import annotations

from dataclasses import dataclass

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


def memory_metrics() -> dict[str, float]:
    """This process's CUDA memory peaks since it started, under verl's names (its FSDP workers log them with
    each actor update): what a micro-batch budget or a colocated engine's share is sized against; none on a CPU."""
    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return {}
    return {"perf/max_memory_allocated_gb": torch.cuda.max_memory_allocated() / 2**30,
            "perf/max_memory_reserved_gb": torch.cuda.max_memory_reserved() / 2**30}


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


# ---- model FLOPs and MFU ----------------------------------------------------------------------------
# Dense bf16 peak of one device, by the name CUDA gives it (tensor cores, no sparsity), from the vendors' sheets.
PEAK_BF16_FLOPS = {"H100": 989e12, "H200": 989e12, "H800": 989e12, "H20": 148e12, "A100": 312e12, "A800": 312e12,
                   "L40S": 362e12, "B200": 2250e12}


@dataclass(frozen=True)
class FlopsShape:
    """What a decoder's training FLOPs depend on: its decoder matmul weights, layers, attention width, vocabulary."""

    matmul_params: int  # weights of the decoder layers' linear maps (a LoRA adapter's included)
    layers: int
    attention_width: int  # query heads × head dim
    vocab: int
    hidden: int

    @classmethod
    def of(cls, model: torch.nn.Module) -> FlopsShape:
        """From a (sharded) policy: a DTensor parameter counts its global elements."""
        config = model.config
        layers = model.model.layers
        matmul = sum(module.weight.numel() for module in layers.modules() if isinstance(module, torch.nn.Linear))
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        return cls(matmul, config.num_hidden_layers, config.num_attention_heads * head_dim, config.vocab_size,
                   config.hidden_size)


def training_flops(shape: FlopsShape, lengths: torch.Tensor, head_tokens: int) -> float:
    """Useful FLOPs of one forward and backward: 6·P·Σs (the decoder's matmuls, P weights, over every real token)
    + 6·L·A·Σs² (attention scores and values, causal, fwd + bwd: PaLM's 12·L·H·Q·T halved by the mask, Chowdhery
    et al. 2022, App. B) + 6·V·D·head_tokens (the lm-head, only at the positions a loss reads). Padding and
    recomputation are not credited: the count bench/perf/train_mfu_gpu.py measures MFU with."""
    lengths = lengths.double()
    attention = 6 * shape.layers * shape.attention_width * float((lengths ** 2).sum())
    return 6 * shape.matmul_params * float(lengths.sum()) + attention + 6 * shape.vocab * shape.hidden * head_tokens


def peak_flops(device: torch.device) -> float | None:
    """The device's dense bf16 peak, None for a CPU or an unlisted GPU (then no MFU is reported)."""
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((peak for model, peak in PEAK_BF16_FLOPS.items() if model in name.split()), None)


def update_throughput_metrics(batch: Batch, step_seconds: float, shape: FlopsShape,
                              peak: float | None) -> dict[str, float]:
    """A training step on this rank: its tokens and tokens per second (as `throughput_metrics`), its useful
    TFLOP/s and, on a GPU of known peak, its MFU (model FLOPs utilisation)."""
    mask = batch["attention_mask"]
    tokens, seconds = mask.sum().item(), max(step_seconds, 1e-9)
    flops = training_flops(shape, mask.sum(dim=1), int(batch["response_mask"].sum()))
    metrics = {"perf/total_num_tokens": tokens, "perf/throughput": tokens / seconds,
               "perf/tflops": flops / seconds / 1e12}
    if peak:
        metrics["perf/mfu"] = flops / seconds / peak
    return metrics
