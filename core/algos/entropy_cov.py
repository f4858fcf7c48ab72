"""Clip-Cov and KL-Cov (Cui et al. 2025, "The Entropy Mechanism of RL for Reasoning LMs", arXiv:2505.22617).

Entropy collapses because tokens whose log-prob and advantage covary most are pushed hardest. Both
methods pick a small fraction of those tokens and restrain them: Clip-Cov cuts their gradient, KL-Cov
adds a |log ρ| penalty on them. The covariance term of token t is (A_t − Ā)·(log π_t − mean log π) over
the valid tokens.

Where we pick them: verl picks inside each micro-batch from the current log-probs, so a mini-batch's
loss depends on how it is split. Here the trainer picks once per step over the whole batch, from the
rollout policy's log-probs (`old_log_probs`, the same numbers on an on-policy step's first mini-batch),
and the batch carries the choice as `cov_selected` (B, T_resp); the losses below then only read it, and
the loss of a mini-batch is the same however it is split into micro-batches.
"""

from __future__ import annotations

import torch

from core.algos.aggregation import aggregate_loss
from core.algos.policy_loss import POLICY_LOSSES, clamped_ratio, masked_mean

COV_LOSSES = ("clip_cov", "kl_cov")  # the policy losses that read `cov_selected`


def token_covariance(advantages: torch.Tensor, log_probs: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """(B, T_resp) (A_t − Ā)·(log π_t − mean log π), means over the valid tokens; −inf on padding."""
    valid = response_mask.bool()
    centred_adv = advantages - masked_mean(advantages, valid)
    centred_logp = log_probs.detach() - masked_mean(log_probs.detach(), valid)
    return torch.where(valid, centred_adv * centred_logp, float("-inf"))


@torch.no_grad()
def clip_cov_selection(advantages, log_probs, response_mask, *, ratio: float, lower: float, upper: float,
                       generator: torch.Generator | None = None) -> torch.Tensor:
    """(B, T_resp) bool: max(⌊ratio·N⌋, 1) tokens drawn at random among those with lower < cov < upper."""
    cov = token_covariance(advantages, log_probs, response_mask)
    candidates = torch.nonzero((cov > lower) & (cov < upper))  # (K, 2) row, column
    count = min(max(int(ratio * int(response_mask.sum())), 1), len(candidates))
    chosen = candidates[torch.randperm(len(candidates), generator=generator)[:count]]
    selected = torch.zeros_like(response_mask, dtype=torch.bool)
    selected[chosen[:, 0], chosen[:, 1]] = True
    return selected


@torch.no_grad()
def kl_cov_selection(advantages, log_probs, response_mask, *, ratio: float) -> torch.Tensor:
    """(B, T_resp) bool: the max(⌊ratio·N⌋, 1) valid tokens of largest covariance."""
    cov = token_covariance(advantages, log_probs, response_mask).flatten()
    num_valid = int(response_mask.sum())
    selected = torch.zeros_like(cov, dtype=torch.bool)
    if num_valid:
        selected[torch.topk(cov, max(int(ratio * num_valid), 1)).indices] = True
    return selected.view_as(response_mask)


def _selected(cov_selected, loss_name: str) -> torch.Tensor:
    if cov_selected is None:
        raise ValueError(f"policy loss {loss_name} needs the batch's `cov_selected` tokens, which "
                         "recipes.entropy_cov.trainer.CovTrainer picks each step; set trainer.cls to it")
    return cov_selected.bool()


@POLICY_LOSSES.register("clip_cov")
def clip_cov_loss(log_probs, old_log_probs, advantages, response_mask, *, clip_ratio_low: float = 0.2,
                  clip_ratio_high: float = 0.2, loss_agg_mode: str = "token-mean", num_tokens: int, num_seqs: int,
                  max_response_length: int, cov_selected: torch.Tensor | None = None, **_):
    """PPO clip surrogate with the selected tokens' loss (and so their gradient) set to 0."""
    selected = _selected(cov_selected, "clip_cov")  # (B, T_resp)
    log_ratio, ratio = clamped_ratio(log_probs, old_log_probs)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_ratio_low, 1.0 + clip_ratio_high)
    # Clip-Cov: L_t = max(−Aρ, −A·clip(ρ)) on unselected tokens, 0 on selected ones (no dual clip, as verl).
    loss_mat = torch.where(selected, 0.0, torch.maximum(unclipped, clipped))  # (B, T_resp)
    loss = aggregate_loss(loss_mat, response_mask, loss_agg_mode, num_tokens=num_tokens, num_seqs=num_seqs,
                          max_response_length=max_response_length)
    return loss, _metrics(clipped > unclipped, -log_ratio, selected, response_mask)


@POLICY_LOSSES.register("kl_cov")
def kl_cov_loss(log_probs, old_log_probs, advantages, response_mask, *, kl_cov_coef: float = 1.0,
                loss_agg_mode: str = "token-mean", num_tokens: int, num_seqs: int, max_response_length: int,
                cov_selected: torch.Tensor | None = None, **_):
    """Unclipped surrogate −Aρ plus kl_cov_coef·|log ρ| on the selected tokens."""
    selected = _selected(cov_selected, "kl_cov")  # (B, T_resp)
    log_ratio, ratio = clamped_ratio(log_probs, old_log_probs)
    # KL-Cov: L_t = −A·ρ + k·|log ρ| on selected tokens, −A·ρ elsewhere (no clip at all, as verl).
    loss_mat = -advantages * ratio + kl_cov_coef * log_ratio.abs() * selected  # (B, T_resp)
    loss = aggregate_loss(loss_mat, response_mask, loss_agg_mode, num_tokens=num_tokens, num_seqs=num_seqs,
                          max_response_length=max_response_length)
    # ppo_kl is mean |log ρ| here, not mean(−log ρ) as in the other losses: verl's KL-Cov logs that, and the
    # side-by-side with verl compares the same number (recipes/entropy_cov/README.md says so).
    return loss, _metrics(torch.zeros_like(selected), log_ratio.abs(), selected, response_mask)


@torch.no_grad()
def _metrics(clipped, token_kl, selected, response_mask) -> dict[str, float]:
    """token_kl (B, T_resp): the per-token KL estimate whose masked mean is logged as ppo_kl."""
    return {
        "pg_clipfrac": masked_mean(clipped.float(), response_mask).item(),
        "ppo_kl": masked_mean(token_kl, response_mask).item(),
        "cov_selected_frac": masked_mean(selected.float(), response_mask).item(),
    }
