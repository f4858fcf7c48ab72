import math

import pytest
import torch

from core.algos import entropy_from_logits, log_probs_from_logits


def test_entropy_of_uniform_is_log_vocab():
    out = entropy_from_logits(torch.zeros(2, 3, 4))
    torch.testing.assert_close(out, torch.full((2, 3), math.log(4)))


def test_entropy_hand_computed():
    # probs [0.25, 0.75]: -(0.25 ln 0.25 + 0.75 ln 0.75) = 0.562335
    out = entropy_from_logits(torch.tensor([0.0, math.log(3.0)]))
    assert out.item() == pytest.approx(0.562335, abs=1e-6)


def test_entropy_is_stable_for_huge_logits():
    out = entropy_from_logits(torch.tensor([[1000.0, 1000.0, -1000.0]]))
    torch.testing.assert_close(out, torch.tensor([math.log(2.0)]))


def test_log_probs_hand_computed():
    # log softmax([0, ln 3])[1] = ln 0.75 = -0.287682
    out = log_probs_from_logits(torch.tensor([[0.0, math.log(3.0)]]), torch.tensor([1]))
    assert out.item() == pytest.approx(-0.287682, abs=1e-6)


def test_log_probs_match_log_softmax_gather_with_gradient():
    logits = torch.randn(2, 5, 11, requires_grad=True)
    labels = torch.randint(0, 11, (2, 5))
    expected = torch.log_softmax(logits, -1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    out = log_probs_from_logits(logits, labels)
    torch.testing.assert_close(out, expected)
    (grad,) = torch.autograd.grad(out.sum(), logits)
    (expected_grad,) = torch.autograd.grad(expected.sum(), logits)
    torch.testing.assert_close(grad, expected_grad)


def test_log_probs_from_bf16_logits_are_fp32_and_accurate():
    logits = torch.randn(3, 700, 17)  # 2,100 tokens spans several upcast chunks
    labels = torch.randint(0, 17, (3, 700))
    out = log_probs_from_logits(logits.bfloat16(), labels)
    expected = log_probs_from_logits(logits.bfloat16().float(), labels)
    assert out.dtype == torch.float32 and out.shape == (3, 700)
    torch.testing.assert_close(out, expected)


def test_entropy_gradient_matches_reference():
    logits = torch.randn(4, 9, dtype=torch.float64, requires_grad=True)
    reference = -(torch.softmax(logits, -1) * torch.log_softmax(logits, -1)).sum(-1)
    (grad,) = torch.autograd.grad(entropy_from_logits(logits).sum(), logits)
    (expected,) = torch.autograd.grad(reference.sum(), logits)
    torch.testing.assert_close(grad, expected)
