import math

import pytest
import torch

from core.algos import kl_penalty

LOG_PROBS = torch.tensor([[0.5, -1.0]])
REF_LOG_PROBS = torch.zeros(1, 2)  # x = [0.5, -1.0]


def test_k1_is_log_ratio():
    out = kl_penalty(LOG_PROBS, REF_LOG_PROBS, "k1")
    torch.testing.assert_close(out, torch.tensor([[0.5, -1.0]]))


def test_k2_is_half_squared_log_ratio():
    out = kl_penalty(LOG_PROBS, REF_LOG_PROBS, "k2")
    torch.testing.assert_close(out, torch.tensor([[0.125, 0.5]]))


def test_k3_hand_computed():
    # e^{-0.5} + 0.5 - 1 = 0.1065307; e^{1} - 1 - 1 = 0.7182818.
    expected = torch.tensor([[math.exp(-0.5) - 0.5, math.e - 2.0]])
    torch.testing.assert_close(kl_penalty(LOG_PROBS, REF_LOG_PROBS, "k3"), expected)
    assert expected[0, 0].item() == pytest.approx(0.1065307, abs=1e-7)


def test_k3_is_clamped_for_far_off_policy_tokens():
    out = kl_penalty(torch.tensor([[-30.0, 30.0, -1000.0]]), torch.zeros(1, 3), "k3")
    torch.testing.assert_close(out, torch.full((1, 3), 10.0))


def test_k3_is_zero_on_policy_and_nonnegative():
    x = torch.linspace(-5, 5, 101).unsqueeze(0)
    out = kl_penalty(x, torch.zeros_like(x), "k3")
    assert (out >= 0).all()
    assert out[0, 50].item() == 0.0  # x = 0


@pytest.mark.parametrize("alias, name", [("kl", "k1"), ("mse", "k2"), ("low_var_kl", "k3")])
def test_kl_aliases_match_canonical_names(alias, name):
    torch.testing.assert_close(
        kl_penalty(LOG_PROBS, REF_LOG_PROBS, alias), kl_penalty(LOG_PROBS, REF_LOG_PROBS, name)
    )


def test_kl_gradient_flows_to_log_probs():
    log_probs = LOG_PROBS.clone().requires_grad_()
    kl_penalty(log_probs, REF_LOG_PROBS, "k3").sum().backward()
    # d/dx (e^{-x} + x - 1) = 1 - e^{-x}
    torch.testing.assert_close(log_probs.grad, 1 - torch.exp(-LOG_PROBS))
