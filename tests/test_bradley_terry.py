"""The Bradley-Terry loss and pairwise accuracy against hand-computed values."""

import math

import pytest
import torch

from core.algos.bradley_terry import bradley_terry_loss, pairwise_accuracy


def test_bradley_terry_loss_matches_hand_computed_values():
    chosen, rejected = torch.tensor([2.0, 0.0, -1.0]), torch.tensor([0.0, 0.0, 1.0])
    # margins 2, 0, -2: -log σ(2) = log(1 + e^-2) = 0.126928; -log σ(0) = log 2 = 0.693147; -log σ(-2) = 2.126928
    expected = (math.log(1 + math.exp(-2)) + math.log(2) + math.log(1 + math.exp(2))) / 3
    assert bradley_terry_loss(chosen, rejected).item() == pytest.approx(expected, rel=1e-6)
    assert expected == pytest.approx((0.126928 + 0.693147 + 2.126928) / 3, abs=1e-6)


def test_bradley_terry_micro_batch_shares_sum_to_the_mean():
    chosen, rejected = torch.randn(6), torch.randn(6)
    whole = bradley_terry_loss(chosen, rejected)
    parts = bradley_terry_loss(chosen[:2], rejected[:2], num_pairs=6) + bradley_terry_loss(chosen[2:], rejected[2:],
                                                                                           num_pairs=6)
    assert parts.item() == pytest.approx(whole.item(), rel=1e-6)


def test_bradley_terry_loss_is_exact_for_large_margins():
    loss = bradley_terry_loss(torch.tensor([-200.0]), torch.tensor([0.0]))
    assert loss.item() == pytest.approx(200.0, rel=1e-6)  # log(1 + e^200) ≈ 200, no overflow to inf


def test_pairwise_accuracy_counts_ties_as_wrong():
    assert pairwise_accuracy(torch.tensor([1.0, 0.5, 0.0, 3.0]), torch.tensor([0.0, 0.5, 1.0, 2.0])) == 0.5


def test_bradley_terry_loss_refuses_mismatched_shapes():
    with pytest.raises(ValueError, match=r"\(P,\) chosen and rejected"):
        bradley_terry_loss(torch.zeros(3), torch.zeros(2))
