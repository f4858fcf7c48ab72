"""Policy losses that change where the importance ratio π/π_old enters: GSPO (one ratio per sequence),
CISPO (a clipped, detached weight on the log-prob, so no token loses its gradient), GPG (no ratio).

Each takes `ppo_clip_loss`'s arguments (see policy_loss.py) and returns (loss, metrics) the same way.
"""

from __future__ import annotations

import torch

from core.algos.aggregation import aggregate_loss
from core.algos.policy_loss import POLICY_LOSSES, clamped_ratio, masked_mean

# Policy losses whose ratio and clip are per sequence: they need one advantage per response.
SEQUENCE_LEVEL_LOSSES = ("gspo",)


@POLICY_LOSSES.register("gspo")
def gspo_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    clip_ratio_low: float = 3e-4,
    clip_ratio_high: float = 4e-4,
    loss_agg_mode: str = "seq-mean-token-mean",
    num_tokens: int,
    num_seqs: int,
    max_response_length: int,
    **_,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped surrogate on the length-normalised sequence ratio s_i; all tensors (B, T_resp)."""
    mask = response_mask.to(log_probs.dtype)
    log_ratio = log_probs - old_log_probs  # (B, T_resp)
    # GSPO (Zheng et al. 2025, arXiv:2507.18071): s_i = exp(mean_t log ρ_t), clipped to [1−ε_low, 1+ε_high].
    seq_log_ratio = (log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1)  # (B,)
    # GSPO-token: s_{i,t} has s_i's value and the gradient of log π_t (sg = stop-gradient), so each
    # token's gradient is s_i·A_i·∇log π_t; the clamp at 10 keeps exp finite, as verl does.
    log_seq_ratio = log_probs - log_probs.detach() + seq_log_ratio.detach().unsqueeze(-1)
    seq_ratio = torch.exp(torch.clamp(log_seq_ratio, max=10.0))  # (B, T_resp)
    unclipped = -advantages * seq_ratio
    clipped = -advantages * torch.clamp(seq_ratio, 1.0 - clip_ratio_low, 1.0 + clip_ratio_high)
    loss_mat = torch.maximum(unclipped, clipped)  # (B, T_resp)

    loss = aggregate_loss(loss_mat, response_mask, loss_agg_mode, num_tokens=num_tokens, num_seqs=num_seqs,
                          max_response_length=max_response_length)
    with torch.no_grad():
        clipped_tokens = (clipped > unclipped) & response_mask.bool()  # (B, T_resp)
        has_tokens = response_mask.bool().any(-1)  # (B,) an empty row is no sequence to count
        metrics = {
            "pg_clipfrac": masked_mean(clipped_tokens.float(), response_mask).item(),
            "pg_clipfrac_seq": masked_mean(clipped_tokens.any(-1).float(), has_tokens).item(),
            "ppo_kl": masked_mean(-log_ratio, response_mask).item(),
        }
    return loss, metrics


@POLICY_LOSSES.register("cispo")
def cispo_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    clip_ratio_low: float = 1.0,
    clip_ratio_high: float = 0.28,
    loss_agg_mode: str = "token-mean",
    num_tokens: int,
    num_seqs: int,
    max_response_length: int,
    **_,
) -> tuple[torch.Tensor, dict[str, float]]:
    """REINFORCE weighted by the clipped, detached importance ratio; all tensors (B, T_resp)."""
    log_ratio, ratio = clamped_ratio(log_probs, old_log_probs)  # (B, T_resp)
    # CISPO (MiniMax-M1, arXiv:2506.13585): L = −sg(clip(ρ, 1−ε_low, 1+ε_high))·A·log π. The clip bounds the
    # weight, not the gradient, so a clipped token still moves (PPO would drop it).
    weight = torch.clamp(ratio, 1.0 - clip_ratio_low, 1.0 + clip_ratio_high).detach()
    loss_mat = -weight * advantages * log_probs  # (B, T_resp)

    loss = aggregate_loss(loss_mat, response_mask, loss_agg_mode, num_tokens=num_tokens, num_seqs=num_seqs,
                          max_response_length=max_response_length)
    with torch.no_grad():
        metrics = {
            "pg_clipfrac": masked_mean((weight != ratio).float(), response_mask).item(),
            "ppo_kl": masked_mean(-log_ratio, response_mask).item(),
        }
    return loss, metrics


@POLICY_LOSSES.register("gpg")
def gpg_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    loss_agg_mode: str = "token-mean",
    num_tokens: int,
    num_seqs: int,
    max_response_length: int,
    **_,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Plain policy gradient −A·log π, no ratio and no clip; all tensors (B, T_resp)."""
    # GPG (Chu et al. 2025, arXiv:2504.02546): L = −A·log π_θ, the surrogate of vanilla REINFORCE.
    loss_mat = -advantages * log_probs  # (B, T_resp)
    loss = aggregate_loss(loss_mat, response_mask, loss_agg_mode, num_tokens=num_tokens, num_seqs=num_seqs,
                          max_response_length=max_response_length)
    with torch.no_grad():
        metrics = {"ppo_kl": masked_mean(old_log_probs - log_probs, response_mask).item()}
    return loss, metrics
