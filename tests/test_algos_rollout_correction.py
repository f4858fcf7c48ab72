"""Off-policy correction (TIS, masked IS): importance weights and the loss they scale, by hand."""

import math

import pytest
import torch

from core.algos import ROLLOUT_CORRECTIONS, ppo_clip_loss, rollout_correction_weights
from core.config import ConfigError, load_config
from core.trainer.config_checks import validate_config

# Two responses; the rollout gave every token log-prob 0 (probability 1), so ρ = π_old/π_rollout = exp(old):
#   row 0: ρ = 1, 3, 0.25    row 1: ρ = 0.5, 1, (padding)
OLD = torch.log(torch.tensor([[1.0, 3.0, 0.25], [0.5, 1.0, 1.0]]))
ROLLOUT = torch.zeros(2, 3)
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])


def weights(mode, **band):
    band = {"tis_cap": 2.0, "mask_low": 0.4, "mask_high": 2.0, **band}
    return rollout_correction_weights(OLD, ROLLOUT, MASK, mode=mode, **band)


def test_tis_truncates_the_ratio_at_the_cap():
    w, metrics = weights("tis")
    # min(ρ, 2): 1, 2, 0.25 | 0.5, 1, and 0 on the padded token.
    torch.testing.assert_close(w, torch.tensor([[1.0, 2.0, 0.25], [0.5, 1.0, 0.0]]))
    # Valid ratios 1, 3, 0.25, 0.5, 1: mean 5.75/5 = 1.15; one of five (the 3) truncated;
    # weights 1 + 2 + 0.25 + 0.5 + 1 = 4.75, mean 0.95.
    assert metrics["rollout_corr/ratio_mean"] == pytest.approx(1.15)
    assert metrics["rollout_corr/ratio_max"] == pytest.approx(3.0)
    assert metrics["rollout_corr/ratio_min"] == pytest.approx(0.25)
    assert metrics["rollout_corr/truncated_frac"] == pytest.approx(0.2)
    assert metrics["rollout_corr/weight_mean"] == pytest.approx(0.95)
    assert "rollout_corr/masked_frac" not in metrics


def test_mask_drops_the_tokens_whose_ratio_leaves_the_band():
    w, metrics = weights("mask")
    # Band [0.4, 2]: 3 and 0.25 are outside (2 of 5 valid tokens), 1, 0.5, 1 inside.
    torch.testing.assert_close(w, torch.tensor([[1.0, 0.0, 0.0], [1.0, 1.0, 0.0]]))
    assert metrics["rollout_corr/masked_frac"] == pytest.approx(0.4)
    assert metrics["rollout_corr/weight_mean"] == pytest.approx(0.6)
    assert "rollout_corr/truncated_frac" not in metrics


def test_tis_mask_truncates_inside_the_band_and_drops_outside():
    w, metrics = weights("tis_mask", tis_cap=0.8)
    # Inside [0.4, 2]: 1 -> min(1, 0.8) = 0.8, 0.5 -> 0.5, 1 -> 0.8; outside: 3 and 0.25 -> 0.
    torch.testing.assert_close(w, torch.tensor([[0.8, 0.0, 0.0], [0.5, 0.8, 0.0]]))
    # Truncated: the two ratios of 1 that were kept (2 of 5); masked: 3 and 0.25 (2 of 5); mean w 2.1/5.
    assert metrics["rollout_corr/truncated_frac"] == pytest.approx(0.4)
    assert metrics["rollout_corr/masked_frac"] == pytest.approx(0.4)
    assert metrics["rollout_corr/weight_mean"] == pytest.approx(0.42)


def test_a_huge_log_ratio_is_clamped_before_exp():
    w, metrics = rollout_correction_weights(torch.tensor([[30.0]]), torch.zeros(1, 1), torch.ones(1, 1), mode="tis",
                                            tis_cap=2.0, mask_low=0.5, mask_high=2.0)
    assert metrics["rollout_corr/ratio_max"] == pytest.approx(math.exp(20.0), rel=1e-5)  # clamp(30) = 20
    assert w.item() == 2.0


def test_the_modes_are_registered():
    assert ROLLOUT_CORRECTIONS.names() == ["mask", "tis", "tis_mask"]


def test_token_weights_scale_each_tokens_loss_and_gradient():
    # ρ = π/π_old = 1 everywhere, so each token's clipped loss is −A; token-mean over 3 valid tokens:
    # (−1·0.5 − 2·2 + 1·1) / 3 = −3.5/3, the masked token (weight 7) contributes nothing.
    log_probs = torch.zeros(2, 2, dtype=torch.float64, requires_grad=True)
    advantages = torch.tensor([[1.0, 2.0], [-1.0, 4.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1], [1, 0]])
    token_weights = torch.tensor([[0.5, 2.0], [1.0, 7.0]], dtype=torch.float64)
    loss, _ = ppo_clip_loss(log_probs, log_probs.detach(), advantages, mask, num_tokens=3, num_seqs=2,
                            max_response_length=2, token_weights=token_weights)
    torch.testing.assert_close(loss, torch.tensor(-3.5 / 3, dtype=torch.float64))
    loss.backward()
    # d/dlogπ of −A·w·ρ/3 at ρ = 1: −A·w/3 per valid token.
    torch.testing.assert_close(log_probs.grad, torch.tensor([[-0.5, -4.0], [1.0, 0.0]], dtype=torch.float64) / 3)


@pytest.mark.parametrize("override, message", [
    ("algorithm.rollout_correction.mode=is", "algorithm.rollout_correction.mode='is' is not one of ['none', 'mask', "
                                             "'tis', 'tis_mask']"),
    ("algorithm.rollout_correction.tis_cap=0", "algorithm.rollout_correction.tis_cap=0 is out of range — expected > 0"),
    ("algorithm.rollout_correction.mask_high=0.5", "algorithm.rollout_correction.mask_low=0.5 ≥ mask_high=0.5 — "
                                                   "expected a band with mask_low < mask_high"),
    ("algorithm.rollout_correction.mode=tis actor.policy_loss=cispo",
     "algorithm.rollout_correction.mode=tis with actor.policy_loss=cispo — expected one of ['vanilla', 'ppo_clip']"),
])
def test_bad_correction_settings_fail_before_anything_starts(override, message):
    with pytest.raises(ConfigError) as info:
        validate_config(load_config("grpo", override.split()), (1, "one process"))
    assert message in str(info.value)
