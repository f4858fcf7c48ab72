import numpy as np
import pytest
import torch

from core.algos import ADV_ESTIMATORS


def _t(rows):
    return torch.tensor(rows, dtype=torch.float64)


def _estimate(name, rewards, mask=None, uids=None, **options):
    rewards = _t(rewards)  # (B, T)
    mask = torch.ones_like(rewards, dtype=torch.long) if mask is None else torch.tensor(mask)
    uids = [f"p{i}" for i in range(rewards.shape[0])] if uids is None else uids
    return ADV_ESTIMATORS.get(name)(
        token_level_rewards=rewards, response_mask=mask, group_ids=np.array(uids, dtype=object),
        **options,
    )


def _rloo(scores, uids):
    """RLOO sequence advantage for outcome scores on the last of 2 valid tokens."""
    rewards = [[0.0, s] for s in scores]
    adv, returns = _estimate("rloo", rewards, uids=uids)
    torch.testing.assert_close(returns, adv)
    torch.testing.assert_close(adv[:, 0], adv[:, 1])  # broadcast over valid tokens
    return adv[:, 0]


# ---- RLOO -----------------------------------------------------------------------------------


def test_rloo_matches_hand_computed_example():
    # n = 4, mean 0.5: A = 4/3·(r − 0.5) = ±2/3; e.g. 1 − mean(0, 0, 1) = 1 − 1/3 = 2/3
    adv = _rloo([1.0, 0.0, 0.0, 1.0], ["p"] * 4)
    torch.testing.assert_close(adv, _t([2 / 3, -2 / 3, -2 / 3, 2 / 3]))


def test_rloo_equals_leave_one_out_mean():
    # a = [1, 2, 6]: 1 − 4 = −3, 2 − 3.5 = −1.5, 6 − 1.5 = 4.5; b = [0, 3]: 0 − 3 = −3, 3 − 0 = 3
    scores, uids = [1.0, 0.0, 2.0, 3.0, 6.0], ["a", "b", "a", "b", "a"]
    adv = _rloo(scores, uids)
    torch.testing.assert_close(adv, _t([-3.0, -3.0, -1.5, 3.0, 4.5]))
    for i, (score, uid) in enumerate(zip(scores, uids)):
        others = [s for j, (s, u) in enumerate(zip(scores, uids)) if u == uid and j != i]
        assert adv[i].item() == pytest.approx(score - sum(others) / len(others))


def test_rloo_group_of_one_keeps_its_reward():
    # No other sample to leave out: verl keeps A = r_i (DESIGN is silent).
    adv = _rloo([0.7, 1.0, 0.0], ["solo", "pair", "pair"])
    torch.testing.assert_close(adv, _t([0.7, 1.0, -1.0]))


def test_rloo_sums_token_rewards_and_zeroes_padding():
    # outcome scores 1 (0.5 + 0.5; the padded 9 is not summed) and 0: A = 2·(±0.5) = ±1
    adv, _ = _estimate("rloo", [[0.5, 0.5, 9.0], [0.0, 0.0, 0.0]], mask=[[1, 1, 0], [1, 1, 1]],
                       uids=["p", "p"])
    torch.testing.assert_close(adv, _t([[1.0, 1.0, 0.0], [-1.0, -1.0, -1.0]]))


def test_rloo_rejects_group_ids_of_wrong_length():
    with pytest.raises(ValueError, match="group_ids has 3 entries but the batch has 2 rows"):
        _estimate("rloo", [[1.0], [0.0]], uids=["a", "a", "b"])


# ---- ReMax ----------------------------------------------------------------------------------


def test_remax_matches_hand_computed_example():
    # reward-to-go of [0, 0.5, 1] = [1.5, 1.5, 1.0]; minus greedy baseline 0.6 = [0.9, 0.9, 0.4]
    adv, returns = _estimate("remax", [[0.0, 0.5, 1.0]], baselines=_t([0.6]))
    torch.testing.assert_close(returns, _t([[1.5, 1.5, 1.0]]))
    torch.testing.assert_close(adv, _t([[0.9, 0.9, 0.4]]))


def test_remax_baseline_is_per_response():
    # each row's outcome 1 on its last valid token; baselines 0.25 and 1.0
    adv, returns = _estimate(
        "remax", [[0.0, 1.0, 7.0], [0.0, 0.0, 1.0]], mask=[[1, 1, 0], [1, 1, 1]],
        baselines=torch.tensor([0.25, 1.0]),
    )
    torch.testing.assert_close(returns, _t([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]]))
    torch.testing.assert_close(adv, _t([[0.75, 0.75, 0.0], [0.0, 0.0, 0.0]]))


def test_remax_without_baselines_names_the_estimator_and_the_input():
    with pytest.raises(ValueError, match="'remax' needs option `baselines` with shape \\(1,\\)"):
        _estimate("remax", [[0.0, 1.0]], values=None)


def test_remax_rejects_baselines_of_the_wrong_shape():
    with pytest.raises(ValueError, match=r"`baselines` has shape \(2,\), expected \(1,\)"):
        _estimate("remax", [[0.0, 1.0]], baselines=[0.5, 0.5])


# ---- REINFORCE++ ----------------------------------------------------------------------------


def test_reinforce_plus_plus_discounts_and_whitens_hand_computed_example():
    # γ = 0.9: G_2 = 1, G_1 = 0 + 0.9·1 = 0.9, G_0 = 0 + 0.9·0.9 = 0.81
    adv, returns = _estimate("reinforce_plus_plus", [[0.0, 0.0, 1.0]], gamma=0.9)
    torch.testing.assert_close(returns, _t([[0.81, 0.9, 1.0]]))
    # mean 0.903333, unbiased std 0.0950438: (G − mean) / std
    torch.testing.assert_close(adv, _t([[-0.982003, -0.035072, 1.017074]]), atol=1e-6, rtol=0)


def test_reinforce_plus_plus_subtracts_kl_already_in_the_token_rewards():
    # rewards after r_t −= β·kl_t: [-0.1, -0.2, 0.9]; γ = 1 gives reward-to-go [0.6, 0.7, 0.9]
    _, returns = _estimate("reinforce_plus_plus", [[-0.1, -0.2, 0.9]])
    torch.testing.assert_close(returns, _t([[0.6, 0.7, 0.9]]))


def test_reinforce_plus_plus_skips_padding_inside_a_response():
    # Token 1 is masked: its reward 5 is ignored and token 0 discounts token 2 once: 0.9·1.
    _, returns = _estimate(
        "reinforce_plus_plus", [[0.0, 5.0, 1.0], [1.0, 0.0, 3.0]], mask=[[1, 0, 1], [1, 1, 0]],
        gamma=0.9,
    )
    torch.testing.assert_close(returns, _t([[0.9, 0.0, 1.0], [1.0, 0.0, 0.0]]))


# ---- every estimator ------------------------------------------------------------------------

ESTIMATORS = ["grpo", "rloo", "remax", "reinforce_plus_plus", "gae"]


def _trainer_call(name, rewards, values, mask):
    """All options the trainer passes, so each estimator must ignore what it does not use."""
    return ADV_ESTIMATORS.get(name)(
        token_level_rewards=rewards, response_mask=mask,
        group_ids=np.array(["a", "a", "b", "b"], dtype=object), values=values, gamma=0.9,
        lam=0.95, norm_adv_by_std=True, baselines=torch.tensor([0.5, 0.0, 1.0, 0.2]),
    )


@pytest.mark.parametrize("name", ESTIMATORS)
def test_padding_never_leaks_into_advantages_or_returns(name):
    gen = torch.Generator().manual_seed(1)
    rewards = torch.randn(4, 5, generator=gen)  # (B, T)
    values = torch.randn(4, 5, generator=gen)  # (B, T)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 0, 1, 1, 0], [1, 1, 0, 0, 0]])
    clean = _trainer_call(name, rewards * mask, values * mask, mask)
    garbage = torch.full_like(rewards, 1e3) * (1 - mask)  # huge values only on padding
    dirty = _trainer_call(name, rewards * mask + garbage, values * mask - garbage, mask)
    for out_clean, out_dirty in zip(clean, dirty):
        torch.testing.assert_close(out_dirty, out_clean)
        assert torch.all(out_dirty[mask == 0] == 0)


def test_all_estimators_are_registered():
    assert set(ESTIMATORS) <= set(ADV_ESTIMATORS.names())
