import math

import pytest
import torch

from core.algos import POLICY_LOSSES, ppo_clip_loss


def _ppo(ratios, advantages, mask=None, **kwargs):
    """PPO loss for one row of tokens with the given ratios π/π_old and advantages."""
    log_probs = torch.log(torch.tensor([ratios], dtype=torch.float64))  # (1, T)
    old_log_probs = torch.zeros_like(log_probs)
    adv = torch.tensor([advantages], dtype=torch.float64)
    mask = torch.ones_like(adv, dtype=torch.long) if mask is None else torch.tensor([mask])
    kwargs.setdefault("num_tokens", int(mask.sum()))
    kwargs.setdefault("num_seqs", 1)
    kwargs.setdefault("max_response_length", adv.shape[1])
    return ppo_clip_loss(log_probs, old_log_probs, adv, mask, **kwargs)


def test_ppo_inside_trust_region_is_plain_ratio_times_advantage():
    loss, metrics = _ppo([1.1], [2.0])
    torch.testing.assert_close(loss, torch.tensor(-2.2, dtype=torch.float64))  # -2 * 1.1
    assert metrics["pg_clipfrac"] == 0.0


def test_ppo_clip_higher_uses_asymmetric_bounds():
    # A=+1, ρ=1.5 clips at 1+0.28 -> -1.28; A=-1, ρ=0.5 clips at 1-0.2 -> 0.8. Mean -0.24.
    loss, metrics = _ppo([1.5, 0.5], [1.0, -1.0], clip_ratio_low=0.2, clip_ratio_high=0.28)
    torch.testing.assert_close(loss, torch.tensor(-0.24, dtype=torch.float64))
    assert metrics["pg_clipfrac"] == 1.0
    # Symmetric 0.2 clips the positive token at 1.2 instead: (-1.2 + 0.8) / 2 = -0.2.
    symmetric, _ = _ppo([1.5, 0.5], [1.0, -1.0])
    torch.testing.assert_close(symmetric, torch.tensor(-0.2, dtype=torch.float64))


def test_dual_clip_caps_negative_advantage_loss():
    # A=-1, ρ=5: max(5, 1.2) = 5, capped at -A·c = 3. A=+2, ρ=5: max(-10, -2.4) = -2.4, no cap.
    loss, metrics = _ppo([5.0, 5.0], [-1.0, 2.0], clip_ratio_c=3.0)
    torch.testing.assert_close(loss, torch.tensor(0.3, dtype=torch.float64))  # (3 - 2.4) / 2
    assert metrics["pg_clipfrac_lower"] == 0.5
    assert metrics["pg_clipfrac"] == 0.5  # only the positive token's clipped term is the max


def test_dual_clipped_token_gets_no_gradient():
    log_probs = torch.tensor([[math.log(5.0)]], requires_grad=True)
    loss, _ = ppo_clip_loss(
        log_probs, torch.zeros(1, 1), torch.tensor([[-1.0]]), torch.ones(1, 1, dtype=torch.long),
        num_tokens=1, num_seqs=1, max_response_length=1,
    )
    loss.backward()
    assert log_probs.grad.item() == 0.0


@pytest.mark.parametrize("c", [1.0, 0.5])
def test_dual_clip_constant_must_exceed_one(c):
    with pytest.raises(ValueError, match="clip_ratio_c"):
        _ppo([1.0], [1.0], clip_ratio_c=c)


def test_ppo_kl_is_mean_of_old_minus_new_log_prob():
    # old - new = -ln 1.5 and -ln 0.5: (-0.405465 + 0.693147) / 2 = 0.143841.
    _, metrics = _ppo([1.5, 0.5], [1.0, 1.0])
    assert metrics["ppo_kl"] == pytest.approx(0.143841, abs=1e-6)


def test_padding_tokens_do_not_affect_loss_or_metrics():
    # Padding token has a wild ratio; only the valid token (A=2, ρ=1.1) counts.
    loss, metrics = _ppo([1.1, 50.0], [2.0, -3.0], mask=[1, 0], num_tokens=1)
    torch.testing.assert_close(loss, torch.tensor(-2.2, dtype=torch.float64))
    assert metrics["pg_clipfrac"] == 0.0 and metrics["pg_clipfrac_lower"] == 0.0
    assert metrics["ppo_kl"] == pytest.approx(-math.log(1.1))


def test_log_ratio_is_clamped_so_huge_drift_stays_finite():
    log_probs = torch.tensor([[100.0, -100.0]])
    loss, metrics = ppo_clip_loss(
        log_probs, torch.zeros(1, 2), torch.tensor([[1.0, -1.0]]), torch.ones(1, 2),
        num_tokens=2, num_seqs=1, max_response_length=2,
    )
    assert torch.isfinite(loss)
    assert metrics["ppo_kl"] == 0.0  # clamped to (-20 + 20) / 2


def test_ppo_uses_requested_aggregation_mode():
    # Losses -2.2 and -1.0 (A=2, ρ=1.1; A=1, ρ=1.0); Dr.GRPO norm: -3.2 / (1 seq · T_max 4).
    loss, _ = _ppo(
        [1.1, 1.0], [2.0, 1.0], loss_agg_mode="seq-mean-token-sum-norm", max_response_length=4
    )
    torch.testing.assert_close(loss, torch.tensor(-0.8, dtype=torch.float64))


def test_policy_loss_registry_names_resolve_to_ppo_clip():
    assert POLICY_LOSSES.get("vanilla") is ppo_clip_loss
    assert POLICY_LOSSES.get("ppo_clip") is ppo_clip_loss
