"""Loss aggregation: reduce a (B, T) per-token loss to a scalar.

Contract: the loss of a GLOBAL mini-batch must not depend on how it is split into micro-batches
or DP ranks. So every mode divides by global normalisers (`num_tokens`, `num_seqs`,
`max_response_length`) computed once over the whole mini-batch, and each micro-batch returns
only its share; summing the shares (gradient accumulation, then all-reduce SUM) gives exactly
the full-batch loss. Dividing by a micro-batch's own token count would weight short
micro-batches more, which is the bug this contract rules out.
"""

from __future__ import annotations

import torch

from core.algos.registry import Registry

AGG_MODES = Registry("loss aggregation mode")


def global_normalisers(mask: torch.Tensor) -> tuple[int, int]:
    """(num_tokens, num_seqs) of a mask that holds the WHOLE mini-batch."""
    return int(mask.sum().item()), int(mask.shape[0])


def aggregate_loss(
    loss_mat: torch.Tensor,
    mask: torch.Tensor,
    mode: str,
    *,
    num_tokens: int,
    num_seqs: int,
    max_response_length: int,
) -> torch.Tensor:
    """This micro-batch's share of the global mini-batch loss (a scalar)."""
    mask = mask.to(loss_mat.dtype)  # response_mask arrives as an integer tensor
    return AGG_MODES.get(mode)(
        loss_mat,
        mask,
        num_tokens=num_tokens,
        num_seqs=num_seqs,
        max_response_length=max_response_length,
    )


@AGG_MODES.register("token-mean")
def _token_mean(loss_mat, mask, *, num_tokens, **_):
    # Σ m·ℓ / N_tokens: every token weighs the same (DAPO, Yu et al. 2025).
    return (loss_mat * mask).sum() / max(num_tokens, 1)


@AGG_MODES.register("seq-mean-token-sum")
def _seq_mean_token_sum(loss_mat, mask, *, num_seqs, **_):
    # Σ_i (Σ_t m·ℓ) / G
    return (loss_mat * mask).sum() / max(num_seqs, 1)


@AGG_MODES.register("seq-mean-token-mean")
def _seq_mean_token_mean(loss_mat, mask, *, num_seqs, **_):
    # Σ_i (Σ_t m·ℓ / Σ_t m) / G: the original GRPO per-sequence mean (Shao et al. 2024).
    seq_sum = (loss_mat * mask).sum(dim=-1)  # (B,)
    seq_len = mask.sum(dim=-1).clamp(min=1)  # (B,) a row with no valid token contributes 0
    return (seq_sum / seq_len).sum() / max(num_seqs, 1)


@AGG_MODES.register("seq-mean-token-sum-norm")
def _seq_mean_token_sum_norm(loss_mat, mask, *, num_seqs, max_response_length, **_):
    # Σ_i (Σ_t m·ℓ) / (G · T_max): Dr.GRPO's length-unbiased constant (Liu et al. 2025).
    return (loss_mat * mask).sum() / (max(num_seqs, 1) * max_response_length)


def local_loss_value(share: float, mask: torch.Tensor, mode: str, *, num_tokens: float, num_seqs: float) -> float:
    """The micro-batch's own loss, for logging: its share rescaled from the global normalisers
    to its own. Averaging these over micro-batches gives the mini-batch loss, as verl reports it;
    averaging the raw shares would divide the loss by the number of micro-batches."""
    if mode == "token-mean":
        return share * num_tokens / max(float(mask.sum()), 1.0)
    return share * num_seqs / max(mask.shape[0], 1)
