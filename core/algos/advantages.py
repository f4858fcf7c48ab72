"""Advantage estimators: token rewards -> (advantages, returns), both (B, T_resp).

Every estimator takes the same keywords, `fn(*, token_level_rewards, response_mask, group_ids,
**options)`, and ignores options it does not use, so the trainer calls any of them the same way
and a recipe switches estimator with one config line. An option an estimator cannot do without
(`values` for gae, `baselines` for remax) fails with a ValueError naming both.

Padding: a masked token neither contributes to nor interrupts a recursion; each response ends at
its last valid token, and both outputs are zero on masked tokens.
"""

from __future__ import annotations

import numpy as np
import torch

from core.algos.registry import Registry
from core.algos.stats import masked_whiten

ADV_ESTIMATORS = Registry("advantage estimator")


def group_indices(group_ids: np.ndarray) -> list[list[int]]:
    """Row indices of each group, groups in order of first appearance; rows may be interleaved."""
    groups: dict[object, list[int]] = {}
    for row, uid in enumerate(group_ids):
        groups.setdefault(uid, []).append(row)
    return list(groups.values())


def _outcome_scores(
    token_level_rewards: torch.Tensor, response_mask: torch.Tensor, group_ids: np.ndarray
) -> torch.Tensor:
    """(B,) outcome reward r_i = Σ_t m_t·r_t of each response, checked against group_ids."""
    scores = (token_level_rewards * response_mask.to(token_level_rewards.dtype)).sum(dim=-1)
    if len(group_ids) != scores.shape[0]:
        raise ValueError(
            f"group_ids has {len(group_ids)} entries but the batch has {scores.shape[0]} rows; "
            "pass one uid per response"
        )
    return scores


def _broadcast(seq_adv: torch.Tensor, response_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(B,) per-response advantages over each response's valid tokens, as (advantages, returns)."""
    advantages = seq_adv.unsqueeze(-1) * response_mask.to(seq_adv.dtype)  # (B, T_resp)
    return advantages, advantages.clone()


def _group_centred(scores: torch.Tensor, group_ids: np.ndarray) -> torch.Tensor:
    """(B,) r_i − mean_g of each response's group; a lone sample keeps r_i (baseline 0), as verl does."""
    centred = scores.clone()  # (B,)
    for rows in group_indices(group_ids):
        if len(rows) > 1:
            centred[rows] = scores[rows] - scores[rows].mean()
    return centred


def _require(estimator: str, name: str, value, shape: tuple[int, ...], like: torch.Tensor):
    """`value` as a tensor of `shape` on `like`'s device and dtype, or a ValueError naming both."""
    if value is None:
        raise ValueError(
            f"advantage estimator '{estimator}' needs option `{name}` with shape {tuple(shape)} "
            "but got none; pass it to the estimator or choose another algorithm.adv_estimator"
        )
    value = torch.as_tensor(value, dtype=like.dtype, device=like.device)
    if tuple(value.shape) != tuple(shape):
        raise ValueError(
            f"advantage estimator '{estimator}': `{name}` has shape {tuple(value.shape)}, "
            f"expected {tuple(shape)} to match token_level_rewards"
        )
    return value


@ADV_ESTIMATORS.register("grpo")
@torch.no_grad()
def grpo_advantages(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    group_ids: np.ndarray,
    epsilon: float = 1e-6,
    norm_adv_by_std: bool = True,
    **_,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Group-relative outcome advantage, broadcast over each response's valid tokens."""
    scores = _outcome_scores(token_level_rewards, response_mask, group_ids)  # (B,)
    seq_adv = torch.empty_like(scores)  # (B,)
    for rows in group_indices(group_ids):
        r = scores[rows]  # (n,)
        if len(rows) == 1:
            # A lone sample has no group baseline: mean 0, std 1, so A = r_i.
            seq_adv[rows] = r
            continue
        # GRPO (Shao et al. 2024): A_i = (r_i − mean_g) / (std_g + ε), unbiased std.
        # Dr.GRPO (Liu et al. 2025) drops the std division: A_i = r_i − mean_g.
        centred = r - r.mean()
        seq_adv[rows] = centred / (r.std() + epsilon) if norm_adv_by_std else centred
    return _broadcast(seq_adv, response_mask)


@ADV_ESTIMATORS.register("rloo")
@torch.no_grad()
def rloo_advantages(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    group_ids: np.ndarray,
    **_,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Leave-one-out baseline per group, broadcast over each response's valid tokens."""
    scores = _outcome_scores(token_level_rewards, response_mask, group_ids)  # (B,)
    seq_adv = scores.clone()  # (B,) a lone sample keeps A = r_i, as verl does
    for rows in group_indices(group_ids):
        n = len(rows)
        if n > 1:
            r = scores[rows]  # (n,)
            # RLOO (Ahmadian et al. 2024): A_i = r_i − mean_{j≠i} r_j = n/(n−1)·(r_i − mean_g)
            seq_adv[rows] = n / (n - 1) * (r - r.mean())
    return _broadcast(seq_adv, response_mask)


@ADV_ESTIMATORS.register("remax")
@torch.no_grad()
def remax_advantages(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    baselines: torch.Tensor | None = None,
    **_,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reward-to-go minus the greedy response's reward; `baselines` (B,) is that reward."""
    rewards = token_level_rewards
    baselines = _require("remax", "baselines", baselines, rewards.shape[:1], like=rewards)  # (B,)
    mask = response_mask.to(rewards.dtype)  # (B, T_resp)
    returns = (rewards * mask).flip(-1).cumsum(-1).flip(-1) * mask  # (B, T_resp) Σ_{t'≥t} r_t'
    # ReMax (Li et al. 2023): A_t = Σ_{t'≥t} r_{t'} − b_i, b_i = reward of the greedy response.
    advantages = (returns - baselines.unsqueeze(-1)) * mask  # (B, T_resp)
    return advantages, returns


@ADV_ESTIMATORS.register("reinforce_plus_plus")
@torch.no_grad()
def reinforce_plus_plus_advantages(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: float = 1.0,
    sum_over_ranks=None,
    **_,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Discounted return of the KL-shaped token rewards, whitened over the batch's valid tokens
    (`sum_over_ranks`: see `masked_whiten`)."""
    rewards = token_level_rewards
    valid = response_mask.bool()  # (B, T_resp)
    returns = torch.zeros_like(rewards)  # (B, T_resp)
    running = torch.zeros_like(rewards[:, 0])  # (B,) G beyond the last valid token is 0
    for t in reversed(range(rewards.shape[1])):
        # REINFORCE++ (Hu 2025): G_t = r_t + γ·G_{t+1}, the KL penalty already inside r_t.
        g_t = rewards[:, t] + gamma * running
        running = torch.where(valid[:, t], g_t, running)  # a padding token passes G through
        returns[:, t] = torch.where(valid[:, t], g_t, 0.0)
    advantages = masked_whiten(returns, valid, sum_over_ranks=sum_over_ranks) * valid  # (B, T_resp)
    return advantages, returns


@ADV_ESTIMATORS.register("gae")
@torch.no_grad()
def gae_advantages(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    values: torch.Tensor | None = None,
    gamma: float = 1.0,
    lam: float = 1.0,
    sum_over_ranks=None,
    **_,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE over each response's valid tokens; returns = A + V, then A whitened over the batch
    (`sum_over_ranks`: see `masked_whiten`)."""
    rewards = token_level_rewards
    values = _require("gae", "values", values, rewards.shape, like=rewards)  # (B, T_resp)
    valid = response_mask.bool()  # (B, T_resp)
    advantages = torch.zeros_like(rewards)  # (B, T_resp), before whitening
    next_value = torch.zeros_like(rewards[:, 0])  # (B,) V beyond the last valid token is 0
    next_adv = torch.zeros_like(next_value)  # (B,)
    for t in reversed(range(rewards.shape[1])):
        # GAE (Schulman et al. 2016): δ_t = r_t + γV_{t+1} − V_t; A_t = δ_t + γλA_{t+1}.
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        adv_t = delta + gamma * lam * next_adv
        # A padding token hands the next valid token's V and A through untouched.
        next_value = torch.where(valid[:, t], values[:, t], next_value)
        next_adv = torch.where(valid[:, t], adv_t, next_adv)
        advantages[:, t] = torch.where(valid[:, t], adv_t, 0.0)
    returns = torch.where(valid, advantages + values, 0.0)  # (B, T_resp) the critic's target
    return masked_whiten(advantages, valid, sum_over_ranks=sum_over_ranks) * valid, returns


@ADV_ESTIMATORS.register("reinforce_plus_plus_baseline")
@torch.no_grad()
def reinforce_plus_plus_baseline_advantages(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    group_ids: np.ndarray,
    sum_over_ranks=None,
    **_,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Group-mean baseline, then whitened over the batch's valid tokens (`sum_over_ranks`: see
    `masked_whiten`)."""
    scores = _outcome_scores(token_level_rewards, response_mask, group_ids)  # (B,)
    # REINFORCE++-baseline (Hu 2025, arXiv:2501.03262): A_i = r_i − mean_g, then batch whitening.
    centred = _group_centred(scores, group_ids)  # (B,)
    valid = response_mask.bool()
    advantages = masked_whiten(centred.unsqueeze(-1).expand_as(valid), valid, sum_over_ranks=sum_over_ranks)
    advantages = advantages * valid  # (B, T_resp)
    return advantages, advantages.clone()


@ADV_ESTIMATORS.register("opo")
@torch.no_grad()
def opo_advantages(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    group_ids: np.ndarray,
    **_,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Length-weighted group baseline, broadcast over each response's valid tokens."""
    scores = _outcome_scores(token_level_rewards, response_mask, group_ids)  # (B,)
    lengths = response_mask.to(scores.dtype).sum(dim=-1)  # (B,) valid tokens per response
    seq_adv = scores.clone()  # (B,) a lone sample keeps r_i (baseline 0), as verl does
    for rows in group_indices(group_ids):
        if len(rows) > 1:
            r, length = scores[rows], lengths[rows]  # (n,)
            # OPO (Hao et al. 2025, arXiv:2505.23585): b_g = Σ_j l_j·r_j / Σ_j l_j, A_i = r_i − b_g.
            seq_adv[rows] = r - (length * r).sum() / length.sum().clamp(min=1)
    return _broadcast(seq_adv, response_mask)


@ADV_ESTIMATORS.register("grpo_passk")
@torch.no_grad()
def grpo_passk_advantages(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    group_ids: np.ndarray,
    epsilon: float = 1e-6,
    norm_adv_by_std: bool = True,
    **_,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pass@k advantage: only each group's best response gets a nonzero advantage."""
    scores = _outcome_scores(token_level_rewards, response_mask, group_ids)  # (B,)
    seq_adv = torch.zeros_like(scores)  # (B,)
    for rows in group_indices(group_ids):
        if len(rows) < 2:
            raise ValueError(f"grpo_passk needs at least 2 samples per prompt, got a group of {len(rows)}; "
                             "raise rollout.n")
        r = scores[rows]  # (n,)
        top2 = torch.topk(r, 2)
        # Pass@k (arXiv:2503.19595, verl's grpo_passk): A_best = (r_max − r_second) / (std_g + ε), others 0.
        advantage = top2.values[0] - top2.values[1]
        seq_adv[rows[int(top2.indices[0])]] = advantage / (r.std() + epsilon) if norm_adv_by_std else advantage
    return _broadcast(seq_adv, response_mask)


@ADV_ESTIMATORS.register("gpg")
@torch.no_grad()
def gpg_advantages(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    group_ids: np.ndarray,
    sum_over_ranks=None,
    **_,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Group-mean baseline scaled by α = B / #(r_i ≠ 0) over the whole batch (`sum_over_ranks`: see
    `masked_whiten`), broadcast over each response's valid tokens."""
    total = sum_over_ranks or (lambda value: value)
    scores = _outcome_scores(token_level_rewards, response_mask, group_ids)  # (B,)
    # GPG (Chu et al. 2025, arXiv:2504.02546), as verl computes it: α = B / max(#(r_i ≠ 0), 1), F_norm = 1.
    alpha = float(total(float(len(scores)))) / max(float(total(float(torch.count_nonzero(scores)))), 1.0)
    # A lone sample keeps α·r_i (baseline 0), as verl does.
    return _broadcast(alpha * _group_centred(scores, group_ids), response_mask)


# Estimators that give one advantage per response (the same on all its tokens): what a sequence-level
# loss (GSPO) needs. gae, reinforce_plus_plus and remax give token-level advantages.
SEQUENCE_LEVEL_ESTIMATORS = ("grpo", "rloo", "reinforce_plus_plus_baseline", "opo", "grpo_passk", "gpg")
