"""The zoo's policy losses (GSPO, CISPO, GPG, Clip-Cov, KL-Cov) and Clip-Cov/KL-Cov's token pick, against
hand-computed numbers; and every new loss's micro-batch invariance."""

import math

import pytest
import torch

from core.algos import POLICY_LOSSES, clip_cov_selection, global_normalisers, kl_cov_selection
from core.algos.entropy_cov import token_covariance


def _t(rows, **kwargs):
    return torch.tensor(rows, dtype=torch.float64, **kwargs)


def _loss(name, log_probs, old_log_probs, advantages, mask, **options):
    """`name`'s loss and metrics over the whole batch given as nested lists; log_probs is a leaf tensor."""
    mask = torch.tensor(mask)
    options.setdefault("loss_agg_mode", "token-mean")
    return POLICY_LOSSES.get(name)(log_probs, _t(old_log_probs), _t(advantages), mask,
                                   num_tokens=int(mask.sum()), num_seqs=mask.shape[0],
                                   max_response_length=mask.shape[1], **options)


# ---- GSPO -----------------------------------------------------------------------------------------
def test_gspo_clips_the_length_normalised_sequence_ratio():
    # Row 0: log ρ = 0.1, 0.3 -> s = e^0.2 = 1.221403, A = 1: max(−1.221403, −clip(s)=−1.2) = −1.2 on both tokens.
    # Row 1: log ρ = −0.05, 0.05, 0 -> s = e^0 = 1, A = −1: loss 1 on each token, not clipped.
    # seq-mean-token-mean: (−1.2 + 1) / 2 = −0.1. Clipped: 2 of 5 tokens, 1 of 2 sequences.
    log_probs = _t([[0.1, 0.3, 0.0], [-0.05, 0.05, 0.0]], requires_grad=True)
    loss, metrics = _loss("gspo", log_probs, [[0.0] * 3] * 2, [[1.0, 1.0, 0.0], [-1.0] * 3],
                          [[1, 1, 0], [1, 1, 1]], clip_ratio_low=0.2, clip_ratio_high=0.2,
                          loss_agg_mode="seq-mean-token-mean")
    torch.testing.assert_close(loss, _t(-0.1))
    assert metrics["pg_clipfrac"] == pytest.approx(0.4) and metrics["pg_clipfrac_seq"] == pytest.approx(0.5)
    # Each token's gradient is −A·s_i·∂log π_t, / 3 tokens / 2 sequences: 1/6 in row 1; the clipped row 0 gets 0.
    loss.backward()
    torch.testing.assert_close(log_probs.grad, _t([[0.0, 0.0, 0.0], [1 / 6] * 3]))


# ---- CISPO ----------------------------------------------------------------------------------------
def test_cispo_weights_log_prob_by_the_clipped_detached_ratio_and_keeps_clipped_gradients():
    # ρ = 1.5, 0.5 with ε_low = 1 (no lower bound), ε_high = 0.28: weights 1.28 (clipped) and 0.5.
    # log π = −1, −2; A = 1, −1: L = −1.28·1·(−1) = 1.28 and −0.5·(−1)·(−2) = −1; token-mean 0.14.
    log_probs = _t([[-1.0, -2.0]], requires_grad=True)
    old = [[-1.0 - math.log(1.5), -2.0 - math.log(0.5)]]
    loss, metrics = _loss("cispo", log_probs, old, [[1.0, -1.0]], [[1, 1]], clip_ratio_low=1.0, clip_ratio_high=0.28)
    torch.testing.assert_close(loss, _t(0.14))
    assert metrics["pg_clipfrac"] == 0.5
    # ∂L/∂log π = −w·A / 2: −0.64 for the clipped token (PPO would give it 0) and 0.25.
    loss.backward()
    torch.testing.assert_close(log_probs.grad, _t([[-0.64, 0.25]]))


# ---- GPG ------------------------------------------------------------------------------------------
def test_gpg_is_minus_advantage_times_log_prob():
    # L = −A·log π = −2·(−1), −1·(−2) = 2, 2; token-mean 2. ∂L/∂log π = −A / 2 = −1, −0.5.
    log_probs = _t([[-1.0, -2.0]], requires_grad=True)
    loss, _ = _loss("gpg", log_probs, [[-1.0, -2.0]], [[2.0, 1.0]], [[1, 1]])
    torch.testing.assert_close(loss, _t(2.0))
    loss.backward()
    torch.testing.assert_close(log_probs.grad, _t([[-1.0, -0.5]]))


# ---- Clip-Cov / KL-Cov: the losses ------------------------------------------------------------------
def test_clip_cov_zeroes_the_selected_tokens_loss_and_gradient():
    # ρ = 1.5, 1.1, 0.5; A = 1, 1, −1; ε = 0.2. Token 0: max(−1.5, −1.2) = −1.2; token 1 is selected: 0 (it
    # would be −1.1); token 2: max(0.5, 0.8) = 0.8. token-mean (−1.2 + 0 + 0.8) / 3 = −0.133333.
    log_probs = _t([[math.log(1.5), math.log(1.1), math.log(0.5)]], requires_grad=True)
    loss, metrics = _loss("clip_cov", log_probs, [[0.0] * 3], [[1.0, 1.0, -1.0]], [[1, 1, 1]],
                          cov_selected=torch.tensor([[False, True, False]]))
    torch.testing.assert_close(loss, _t(-0.4 / 3))
    assert metrics["pg_clipfrac"] == pytest.approx(2 / 3) and metrics["cov_selected_frac"] == pytest.approx(1 / 3)
    loss.backward()
    assert log_probs.grad.tolist() == [[0.0, 0.0, 0.0]]  # two tokens clipped by PPO, one by Clip-Cov


def test_kl_cov_adds_the_abs_log_ratio_penalty_on_selected_tokens_only():
    # ρ = 1.5 (selected), 0.5; A = 1, −1; k = 1: −1.5 + ln 1.5 = −1.094535 and −(−1)·0.5 = 0.5 (no clip);
    # token-mean (−1.094535 + 0.5) / 2 = −0.297267.
    log_probs = _t([[math.log(1.5), math.log(0.5)]], requires_grad=True)
    loss, metrics = _loss("kl_cov", log_probs, [[0.0, 0.0]], [[1.0, -1.0]], [[1, 1]], kl_cov_coef=1.0,
                          cov_selected=torch.tensor([[True, False]]))
    torch.testing.assert_close(loss, _t(-0.297267), atol=1e-6, rtol=0)
    assert metrics["cov_selected_frac"] == 0.5
    # ∂/∂log π: (−A·ρ + k·sign(log ρ)) / 2 = (−1.5 + 1) / 2 = −0.25 and (0.5) / 2 = 0.25.
    loss.backward()
    torch.testing.assert_close(log_probs.grad, _t([[-0.25, 0.25]]))


def test_kl_cov_logs_ppo_kl_as_mean_abs_log_ratio_as_verl_does():
    # verl's compute_policy_loss_kl_cov logs actor/ppo_kl = masked mean |log ρ|. log ρ = ln 1.5, ln 0.5 (the
    # padded third token, log ρ = 3, must not count): (0.405465 + 0.693147) / 2 = 0.549306. The other losses'
    # mean(−log ρ) would be (−0.405465 + 0.693147) / 2 = 0.143841, which Clip-Cov keeps (as verl's Clip-Cov).
    log_probs = _t([[math.log(1.5), math.log(0.5), 3.0]])
    options = dict(cov_selected=torch.tensor([[True, False, False]]))
    _, kl_cov = _loss("kl_cov", log_probs, [[0.0] * 3], [[1.0, -1.0, 0.0]], [[1, 1, 0]], **options)
    _, clip_cov = _loss("clip_cov", log_probs, [[0.0] * 3], [[1.0, -1.0, 0.0]], [[1, 1, 0]], **options)
    assert kl_cov["ppo_kl"] == pytest.approx(0.549306, abs=1e-6)
    assert clip_cov["ppo_kl"] == pytest.approx(0.143841, abs=1e-6)


@pytest.mark.parametrize("name", ["clip_cov", "kl_cov"])
def test_cov_losses_without_the_trainers_pick_say_which_trainer_makes_it(name):
    with pytest.raises(ValueError, match="recipes.entropy_cov.trainer.CovTrainer"):
        _loss(name, _t([[0.0]]), [[0.0]], [[1.0]], [[1]])


# ---- Clip-Cov / KL-Cov: the pick --------------------------------------------------------------------
# Valid tokens: A = 1, 1, −1, −1 (mean 0); log π = −1, −3, −2.5, −1.5 (mean −2). The padded third column has
# huge values that must neither count nor move the means. Covariances: 1·1 = 1, 1·(−1) = −1, −1·(−0.5) = 0.5,
# −1·0.5 = −0.5.
ADV = _t([[1.0, 1.0, 5.0], [-1.0, -1.0, 5.0]])
LOGP = _t([[-1.0, -3.0, 10.0], [-2.5, -1.5, 10.0]])
MASK = torch.tensor([[1, 1, 0], [1, 1, 0]])


def test_token_covariance_is_centred_over_valid_tokens():
    cov = token_covariance(ADV, LOGP, MASK)
    torch.testing.assert_close(cov[:, :2], _t([[1.0, -1.0], [0.5, -0.5]]))
    assert cov[:, 2].tolist() == [float("-inf")] * 2


def test_kl_cov_picks_the_largest_covariances():
    # ⌊0.5·4⌋ = 2 tokens: covariances 1 and 0.5. ⌊0.1·4⌋ = 0, raised to 1 token: covariance 1.
    assert kl_cov_selection(ADV, LOGP, MASK, ratio=0.5).tolist() == [[True, False, False], [True, False, False]]
    assert kl_cov_selection(ADV, LOGP, MASK, ratio=0.1).tolist() == [[True, False, False], [False, False, False]]


def test_clip_cov_draws_only_among_covariances_inside_its_bounds():
    # Inside (0.4, 0.9): only the 0.5 token (1 is above the bound), and ⌊0.1·4⌋ → 1 token is drawn.
    picked = clip_cov_selection(ADV, LOGP, MASK, ratio=0.1, lower=0.4, upper=0.9)
    assert picked.tolist() == [[False, False, False], [True, False, False]]
    # All four valid tokens inside (−2, 2): ⌊0.5·4⌋ = 2 drawn, never padding; the same seed draws the same.
    draws = [clip_cov_selection(ADV, LOGP, MASK, ratio=0.5, lower=-2.0, upper=2.0,
                                generator=torch.Generator().manual_seed(7)) for _ in range(2)]
    assert draws[0].sum() == 2 and not (draws[0] & ~MASK.bool()).any()
    assert torch.equal(draws[0], draws[1])


# ---- every new loss: a mini-batch's loss does not depend on its micro-batch split ---------------------
NEW_LOSSES = ["gspo", "cispo", "gpg", "clip_cov", "kl_cov"]
MODES = ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
T_MAX = 6


def _random_problem(seed=0, batch=8):
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, T_MAX + 1, (batch,), generator=gen)
    lengths[3] = 0  # one empty response exercises the zero-length guards
    mask = (torch.arange(T_MAX) < lengths.unsqueeze(1)).long()  # (B, T)
    log_probs = (-torch.rand(batch, T_MAX, generator=gen) * 3).requires_grad_()
    old_log_probs = log_probs.detach() + 0.3 * torch.randn(batch, T_MAX, generator=gen)
    advantages = torch.randn(batch, 1, generator=gen).expand(batch, T_MAX) * mask  # one per response
    selected = (torch.rand(batch, T_MAX, generator=gen) < 0.3) & mask.bool()  # as the trainer's pick
    return log_probs, old_log_probs, advantages, mask, selected


def _loss_and_grad(name, mode, splits):
    """Sum of the micro-batch shares over `splits` chunks, each normalised by the whole batch."""
    log_probs, old, adv, mask, selected = _random_problem()
    num_tokens, num_seqs = global_normalisers(mask)
    total = sum(
        POLICY_LOSSES.get(name)(lp, o, a, m, loss_agg_mode=mode, num_tokens=num_tokens, num_seqs=num_seqs,
                                max_response_length=T_MAX, cov_selected=s)[0]
        for lp, o, a, m, s in zip(*(x.chunk(splits) for x in (log_probs, old, adv, mask, selected)))
    )
    total.backward()
    return total.detach(), log_probs.grad


@pytest.mark.parametrize("splits", [2, 4])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", NEW_LOSSES)
def test_new_losses_are_micro_batch_invariant(name, mode, splits):
    full_loss, full_grad = _loss_and_grad(name, mode, 1)
    split_loss, split_grad = _loss_and_grad(name, mode, splits)
    assert full_grad.abs().sum() > 0  # the comparison below is not between two zeros
    torch.testing.assert_close(split_loss, full_loss)
    torch.testing.assert_close(split_grad, full_grad)
