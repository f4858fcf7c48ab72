"""The zoo's outcome estimators (REINFORCE++-baseline, OPO, pass@k GRPO, GPG) against hand-computed numbers."""

import numpy as np
import pytest
import torch

from core.algos import ADV_ESTIMATORS


def _t(rows):
    return torch.tensor(rows, dtype=torch.float64)


def _estimate(name, rewards, mask, uids, **options):
    """(advantages, returns) of `name` for token rewards (B, T), a mask and one uid per row."""
    adv, returns = ADV_ESTIMATORS.get(name)(
        token_level_rewards=_t(rewards), response_mask=torch.tensor(mask),
        group_ids=np.array(uids, dtype=object), **options,
    )
    torch.testing.assert_close(returns, adv)  # outcome estimators: returns are the advantages
    return adv


def test_reinforce_pp_baseline_subtracts_the_group_mean_then_whitens_over_valid_tokens():
    # Centred: a1 = 1 − 0.5 = 0.5, a2 = −0.5, the lone b keeps 0.5. Its 5 valid tokens: 0.5, 0.5, −0.5, −0.5,
    # 0.5 -> mean 0.1, unbiased var (3·0.4² + 2·0.6²) / 4 = 0.3, std 0.547723:
    # 0.4 / 0.547723 = 0.730297 and −0.6 / 0.547723 = −1.095445; the padded token stays 0.
    adv = _estimate("reinforce_plus_plus_baseline", [[0.0, 1.0], [0.0, 0.0], [0.5, 9.0]],
                    mask=[[1, 1], [1, 1], [1, 0]], uids=["a", "a", "b"])
    torch.testing.assert_close(adv, _t([[0.730297, 0.730297], [-1.095445, -1.095445], [0.730297, 0.0]]),
                               atol=1e-6, rtol=0)


def test_opo_baseline_is_the_length_weighted_group_mean():
    # Group p: r = 1, 0, 1 with 2, 4, 1 valid tokens: b = (2·1 + 4·0 + 1·1) / 7 = 3/7, A = 4/7, −3/7, 4/7.
    # The lone q keeps its reward 0.25 (baseline 0, as verl).
    mask = [[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 0, 0]]
    rewards = [[0, 1, 0, 0], [0, 0, 0, 0], [1, 0, 0, 0], [0, 0.25, 0, 0]]
    adv = _estimate("opo", rewards, mask, uids=["p", "p", "p", "q"])
    expected = _t([[4 / 7] * 2 + [0, 0], [-3 / 7] * 4, [4 / 7, 0, 0, 0], [0.25, 0.25, 0, 0]])
    torch.testing.assert_close(adv, expected)


def test_grpo_passk_gives_only_the_best_response_the_gap_to_the_second():
    # r = 0.2, 1.0, 0.5, 0.0: best 1.0, second 0.5, gap 0.5. std: mean 0.425, squared deviations
    # 0.050625 + 0.330625 + 0.005625 + 0.180625 = 0.5675, / 3 = 0.189167, sqrt 0.434933; 0.5 / 0.434933 = 1.149601.
    rewards, mask, uids = [[0.2], [1.0], [0.5], [0.0]], [[1]] * 4, ["p"] * 4
    adv = _estimate("grpo_passk", rewards, mask, uids)
    torch.testing.assert_close(adv, _t([[0.0], [1.149601], [0.0], [0.0]]), atol=1e-5, rtol=0)
    unnormalised = _estimate("grpo_passk", rewards, mask, uids, norm_adv_by_std=False)
    torch.testing.assert_close(unnormalised, _t([[0.0], [0.5], [0.0], [0.0]]))


def test_grpo_passk_refuses_a_group_of_one():
    with pytest.raises(ValueError, match="at least 2 samples per prompt"):
        _estimate("grpo_passk", [[1.0], [0.0], [1.0]], [[1]] * 3, uids=["p", "p", "solo"])


def test_gpg_scales_the_group_centred_reward_by_batch_over_nonzero_rewards():
    # 4 responses, 1 nonzero reward: α = 4 / 1. Group a: 1 − 0.5 = 0.5, 0 − 0.5 = −0.5 -> ±2; group b all 0.
    adv = _estimate("gpg", [[1.0], [0.0], [0.0], [0.0]], [[1]] * 4, uids=["a", "a", "b", "b"])
    torch.testing.assert_close(adv, _t([[2.0], [-2.0], [0.0], [0.0]]))


def test_gpg_counts_responses_and_nonzero_rewards_over_all_ranks():
    # This rank: 4 responses, 1 nonzero reward; another rank adds 4 responses, none rewarded. α = 8 / 1 = 8,
    # so group a's ±0.5 becomes ±4 (this rank alone would give α = 4).
    other_rank = iter([4.0, 0.0])  # what the other rank adds to each sum, in the order they are taken
    adv = _estimate("gpg", [[1.0], [0.0], [0.0], [0.0]], [[1]] * 4, uids=["a", "a", "b", "b"],
                    sum_over_ranks=lambda value: value + next(other_rank))
    torch.testing.assert_close(adv, _t([[4.0], [-4.0], [0.0], [0.0]]))
