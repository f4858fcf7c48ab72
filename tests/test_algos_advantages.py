import numpy as np
import pytest
import torch

from core.algos import ADV_ESTIMATORS


def _outcome_rewards(scores, length=3):
    """Token rewards (B, T) with the outcome score on the last token, all tokens valid."""
    rewards = torch.zeros(len(scores), length)
    rewards[:, -1] = torch.tensor(scores)
    return rewards, torch.ones(len(scores), length, dtype=torch.long)


def _grpo(scores, uids, **options):
    rewards, mask = _outcome_rewards(scores)
    group_ids = np.array(uids, dtype=object)
    adv, returns = ADV_ESTIMATORS.get("grpo")(
        token_level_rewards=rewards, response_mask=mask, group_ids=group_ids, **options
    )
    torch.testing.assert_close(returns, adv)
    return adv[:, 0]  # every valid token carries the sequence advantage


def test_grpo_advantage_matches_hand_computed_example():
    # mean 0.5, unbiased std 0.57735 -> A = ±0.5 / 0.57735 = ±0.866025
    adv = _grpo([1.0, 0.0, 1.0, 0.0], ["p"] * 4)
    torch.testing.assert_close(adv, torch.tensor([0.866025, -0.866025, 0.866025, -0.866025]))


def test_grpo_groups_may_be_interleaved():
    # a: [1, 3] mean 2, std 1.414214 -> ∓0.707107; b: [0, 3, 6] mean 3, std 3 -> -1, 0, 1.
    adv = _grpo([1.0, 0.0, 3.0, 3.0, 6.0], ["a", "b", "a", "b", "b"])
    torch.testing.assert_close(adv, torch.tensor([-0.707107, -1.0, 0.707107, 0.0, 1.0]))


def test_dr_grpo_drops_std_normalisation():
    adv = _grpo([1.0, 0.0, 3.0, 3.0, 6.0], ["a", "b", "a", "b", "b"], norm_adv_by_std=False)
    torch.testing.assert_close(adv, torch.tensor([-1.0, -3.0, 1.0, 0.0, 3.0]))


def test_grpo_group_of_one_keeps_its_reward():
    adv = _grpo([0.7, 1.0, 0.0], ["solo", "pair", "pair"])
    assert adv[0] == torch.tensor(0.7)  # exactly r_i, not r_i / (1 + ε)


def test_grpo_group_with_equal_rewards_gives_zero_not_nan():
    adv = _grpo([1.0, 1.0, 1.0], ["p"] * 3)
    torch.testing.assert_close(adv, torch.zeros(3))


def test_grpo_epsilon_option_is_used():
    # std of [1, 0] is 0.707107; with ε = 1: 0.5 / 1.707107 = 0.292893
    adv = _grpo([1.0, 0.0], ["p", "p"], epsilon=1.0)
    torch.testing.assert_close(adv, torch.tensor([0.292893, -0.292893]))


def test_grpo_sums_token_rewards_and_zeroes_padding():
    rewards = torch.tensor([[0.5, 0.5, 0.0], [0.0, 0.0, 0.0]])  # outcome scores 1 and 0
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    group_ids = np.array(["p", "p"], dtype=object)
    adv, _ = ADV_ESTIMATORS.get("grpo")(
        token_level_rewards=rewards, response_mask=mask, group_ids=group_ids
    )
    a = 0.5 / 0.707107  # ±0.707107 after the unbiased std of [1, 0]
    torch.testing.assert_close(adv, torch.tensor([[a, a, 0.0], [-a, -a, -a]]))


def test_grpo_ignores_options_meant_for_other_estimators():
    adv = _grpo([1.0, 0.0], ["p", "p"], gamma=0.9, lam=0.95)
    assert adv.shape == (2,)


def test_grpo_rejects_group_ids_of_wrong_length():
    rewards, mask = _outcome_rewards([1.0, 0.0])
    group_ids = np.array(["a", "a", "b"], dtype=object)
    with pytest.raises(ValueError, match="group_ids has 3 entries but the batch has 2 rows"):
        ADV_ESTIMATORS.get("grpo")(
            token_level_rewards=rewards, response_mask=mask, group_ids=group_ids
        )
