"""The Bradley-Terry pairwise loss of a reward model (Bradley & Terry 1952; Ouyang et al. 2022, eq. 1).

P(chosen ≻ rejected) = σ(r_chosen − r_rejected), so the negative log-likelihood of the preferences is

    loss = −mean log σ(r_chosen − r_rejected)

as TRL's RewardTrainer and OpenRLHF's PairWiseLoss compute it (`logsigmoid`, exact for large margins).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def bradley_terry_loss(chosen_scores: torch.Tensor, rejected_scores: torch.Tensor,
                       num_pairs: float | None = None) -> torch.Tensor:
    """Σ −log σ(r_c − r_r) over the (P,) pairs, divided by `num_pairs` (default P): a micro-batch's share of
    the mean over a mini-batch of `num_pairs` pairs, so split micro-batches sum to the mini-batch's mean."""
    if chosen_scores.shape != rejected_scores.shape or chosen_scores.dim() != 1:
        raise ValueError(f"expected (P,) chosen and rejected scores, got {tuple(chosen_scores.shape)} and "
                         f"{tuple(rejected_scores.shape)}")
    total = -F.logsigmoid(chosen_scores.float() - rejected_scores.float()).sum()
    return total / (num_pairs if num_pairs is not None else max(1, chosen_scores.numel()))


def pairwise_accuracy(chosen_scores: torch.Tensor, rejected_scores: torch.Tensor) -> float:
    """Share of pairs whose chosen response scores strictly above its rejected one (a tie counts as wrong)."""
    if chosen_scores.numel() == 0:
        raise ValueError("pairwise_accuracy: no pairs")
    return float((chosen_scores > rejected_scores).float().mean())
