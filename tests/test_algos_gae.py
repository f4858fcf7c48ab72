import numpy as np
import pytest
import torch

from core.algos import ADV_ESTIMATORS, masked_whiten


def _gae(rewards, values, mask=None, **options):
    """GAE on float64 rows; mask defaults to all tokens valid."""
    rewards = torch.tensor(rewards, dtype=torch.float64)  # (B, T)
    values = torch.tensor(values, dtype=torch.float64)  # (B, T)
    mask = torch.ones_like(rewards, dtype=torch.long) if mask is None else torch.tensor(mask)
    group_ids = np.arange(rewards.shape[0]).astype(object)
    return ADV_ESTIMATORS.get("gae")(
        token_level_rewards=rewards, response_mask=mask, group_ids=group_ids, values=values,
        **options,
    )


def _t(rows):
    return torch.tensor(rows, dtype=torch.float64)


def test_gae_with_gamma_lambda_one_matches_hand_computed_example():
    # δ_2 = 1 + 0 − 0.7 = 0.3; δ_1 = 0 + 0.7 − 0.6 = 0.1; δ_0 = 0 + 0.6 − 0.5 = 0.1
    # A_2 = 0.3; A_1 = 0.1 + 0.3 = 0.4; A_0 = 0.1 + 0.4 = 0.5; returns = A + V = 1, 1, 1
    adv, returns = _gae([[0.0, 0.0, 1.0]], [[0.5, 0.6, 0.7]], gamma=1.0, lam=1.0)
    torch.testing.assert_close(returns, _t([[1.0, 1.0, 1.0]]))
    torch.testing.assert_close(returns - _t([[0.5, 0.6, 0.7]]), _t([[0.5, 0.4, 0.3]]))
    # whitened: mean 0.4, unbiased var (0.01 + 0 + 0.01) / 2 = 0.01, std 0.1 (+1e-8 in the rsqrt)
    torch.testing.assert_close(adv, _t([[1.0, 0.0, -1.0]]), atol=1e-6, rtol=0)


def test_gae_discounting_matches_hand_computed_example():
    # γ = 0.9, λ = 0.8, γλ = 0.72
    # δ_2 = 1 − 0.7 = 0.3; δ_1 = 0.9·0.7 − 0.6 = 0.03; δ_0 = 0.9·0.6 − 0.5 = 0.04
    # A_2 = 0.3; A_1 = 0.03 + 0.72·0.3 = 0.246; A_0 = 0.04 + 0.72·0.246 = 0.21712
    _, returns = _gae([[0.0, 0.0, 1.0]], [[0.5, 0.6, 0.7]], gamma=0.9, lam=0.8)
    torch.testing.assert_close(returns, _t([[0.71712, 0.846, 1.0]]))  # A + V


def test_gae_defaults_to_gamma_lambda_one():
    _, returns = _gae([[0.0, 0.0, 1.0]], [[0.5, 0.6, 0.7]])
    torch.testing.assert_close(returns, _t([[1.0, 1.0, 1.0]]))


def test_gae_whitens_over_valid_tokens_of_the_whole_batch():
    rewards = [[0.0, 1.0, 0.0], [0.0, 0.0, 2.0]]
    values = [[0.1, 0.2, 0.0], [0.3, 0.1, 0.4]]
    adv, _ = _gae(rewards, values, mask=[[1, 1, 0], [1, 1, 1]])
    valid = adv[torch.tensor([[1, 1, 0], [1, 1, 1]]).bool()]  # 5 tokens across both rows
    torch.testing.assert_close(valid.mean(), torch.tensor(0.0, dtype=torch.float64))
    torch.testing.assert_close(valid.std(), torch.tensor(1.0, dtype=torch.float64))


def test_gae_response_ends_at_its_last_valid_token():
    # Row 0: last token is padding with garbage; V beyond token 1 is 0, so
    # δ_1 = 1 − 0.6 = 0.4, δ_0 = 0.6 − 0.5 = 0.1, A = [0.5, 0.4], returns = [1.0, 1.0, 0].
    rewards = [[0.0, 1.0, 9.0], [0.0, 0.0, 1.0]]
    values = [[0.5, 0.6, 99.0], [0.5, 0.6, 0.7]]
    adv, returns = _gae(rewards, values, mask=[[1, 1, 0], [1, 1, 1]])
    torch.testing.assert_close(returns, _t([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]]))
    assert adv[0, 2] == 0.0


def test_gae_skips_padding_inside_a_response():
    # Token 1 is masked (e.g. a tool observation): its reward 5 and value 7 are ignored and
    # token 0 bootstraps from token 2. γ = 0.9, λ = 1:
    # A_2 = 1 − 0.7 = 0.3; δ_0 = 0.9·0.7 − 0.5 = 0.13; A_0 = 0.13 + 0.9·0.3 = 0.4
    rewards = [[0.0, 5.0, 1.0], [1.0, 0.0, 0.0]]
    values = [[0.5, 7.0, 0.7], [0.0, 0.0, 0.0]]
    _, returns = _gae(rewards, values, mask=[[1, 0, 1], [1, 1, 1]], gamma=0.9, lam=1.0)
    torch.testing.assert_close(returns[0], _t([0.9, 0.0, 1.0]))  # A + V = 0.4 + 0.5, 0, 0.3 + 0.7


def _design_recursion(rewards, values, mask, gamma, lam):
    """DESIGN §4 as a plain loop: per row, right to left over its valid tokens only."""
    advantages = [[0.0] * len(row) for row in rewards]
    returns = [[0.0] * len(row) for row in rewards]
    for i, row in enumerate(mask):
        valid = [t for t, m in enumerate(row) if m]
        next_value, next_adv = 0.0, 0.0
        for t in reversed(valid):
            delta = rewards[i][t] + gamma * next_value - values[i][t]
            advantages[i][t] = delta + gamma * lam * next_adv
            returns[i][t] = advantages[i][t] + values[i][t]
            next_value, next_adv = values[i][t], advantages[i][t]
    flat = [a for a_row, m_row in zip(advantages, mask) for a, m in zip(a_row, m_row) if m]
    mean = sum(flat) / len(flat)
    var = sum((a - mean) ** 2 for a in flat) / (len(flat) - 1)
    whitened = [
        [(a - mean) / (var + 1e-8) ** 0.5 if m else 0.0 for a, m in zip(a_row, m_row)]
        for a_row, m_row in zip(advantages, mask)
    ]
    return whitened, returns


def test_gae_equals_design_recursion_written_as_a_python_loop():
    gen = torch.Generator().manual_seed(0)
    rewards = torch.randn(4, 7, generator=gen, dtype=torch.float64)
    values = torch.randn(4, 7, generator=gen, dtype=torch.float64)
    mask = (torch.rand(4, 7, generator=gen) > 0.3).long()  # holes anywhere
    mask[:, 0] = 1
    mask[1, 4:] = 0  # plus a right-padded row
    adv, returns = _gae(rewards.tolist(), values.tolist(), mask=mask.tolist(), gamma=0.95, lam=0.9)
    want_adv, want_returns = _design_recursion(
        rewards.tolist(), values.tolist(), mask.tolist(), gamma=0.95, lam=0.9
    )
    torch.testing.assert_close(adv, _t(want_adv))
    torch.testing.assert_close(returns, _t(want_returns))


def test_gae_without_values_names_the_estimator_and_the_input():
    with pytest.raises(ValueError, match="'gae' needs option `values`"):
        ADV_ESTIMATORS.get("gae")(
            token_level_rewards=torch.zeros(1, 3), response_mask=torch.ones(1, 3),
            group_ids=np.array(["p"], dtype=object), values=None, gamma=1.0, lam=1.0,
        )


def test_gae_rejects_values_of_the_wrong_shape():
    with pytest.raises(ValueError, match=r"'gae': `values` has shape \(1, 2\), expected \(1, 3\)"):
        _gae([[0.0, 0.0, 1.0]], [[0.5, 0.6]])


def test_masked_whiten_matches_hand_computed_example():
    values = _t([[1.0, 2.0, 3.0, 100.0]])
    mask = torch.tensor([[1, 1, 1, 0]])
    # valid tokens 1, 2, 3: mean 2, unbiased var 1; the padded 100 moves neither
    torch.testing.assert_close(masked_whiten(values, mask)[:, :3], _t([[-1.0, 0.0, 1.0]]))
    # shift_mean=False adds the mean back after scaling (verl): -1 + 2, 0 + 2, 1 + 2
    kept = masked_whiten(values, mask, shift_mean=False)[:, :3]
    torch.testing.assert_close(kept, _t([[1.0, 2.0, 3.0]]))


def test_masked_whiten_needs_two_valid_tokens():
    with pytest.raises(ValueError, match="at least 2 valid tokens.*got 1"):
        masked_whiten(_t([[1.0, 2.0]]), torch.tensor([[1, 0]]))
