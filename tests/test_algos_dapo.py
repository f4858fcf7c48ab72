import numpy as np
import pytest
import torch

from core.algos import overlong_penalty, uniform_groups


def test_dynamic_sampling_keeps_only_groups_with_differing_rewards():
    scores = torch.tensor([1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0])
    uids = np.array(["all-right"] * 3 + ["mixed"] * 3 + ["all-wrong"] * 3, dtype=object)
    keep = ~uniform_groups(scores, uids)
    assert keep.tolist() == [False] * 3 + [True] * 3 + [False] * 3


def test_uniform_groups_accepts_numpy_and_interleaved_groups():
    scores = np.array([0.5, 1.0, 0.5, 0.0])  # a = [0.5, 0.5], b = [1.0, 0.0]
    uniform = uniform_groups(scores, np.array(["a", "b", "a", "b"], dtype=object))
    assert uniform.dtype == np.bool_
    assert uniform.tolist() == [True, False, True, False]


def test_uniform_groups_keeps_a_group_of_one():
    # verl keeps singletons; otherwise rollout.n=1 could never fill a batch.
    assert uniform_groups([1.0, 0.0, 0.0], np.array(["solo", "p", "p"], dtype=object)).tolist() == [
        False, True, True,
    ]


def test_uniform_groups_rejects_group_ids_of_wrong_length():
    with pytest.raises(ValueError, match="group_ids has 1 entries but there are 2 scores"):
        uniform_groups([1.0, 0.0], np.array(["p"], dtype=object))


def test_overlong_penalty_matches_hand_computed_example():
    # L_max = 20, L_buf = 4: no penalty up to 16, then −(L − 16)/4·factor
    # L = 10 -> 0; L = 16 -> 0; L = 18 (midway) -> −0.5; L = 20 -> −1
    penalty = overlong_penalty(torch.tensor([10, 16, 18, 20]), 20, 4, penalty_factor=1.0)
    torch.testing.assert_close(penalty, torch.tensor([0.0, 0.0, -0.5, -1.0]))


def test_overlong_penalty_scales_with_factor():
    # L = 19: −(19 − 16)/4·0.5 = −0.375; L = 20: −factor = −0.5
    penalty = overlong_penalty(np.array([19, 20]), 20, 4, penalty_factor=0.5)
    torch.testing.assert_close(penalty, torch.tensor([-0.375, -0.5]))


@pytest.mark.parametrize("buffer_len", [0, -1, 21])
def test_overlong_buffer_must_fit_in_the_response_budget(buffer_len):
    with pytest.raises(ValueError, match=r"reward\.overlong_buffer\.len="):
        overlong_penalty(torch.tensor([10]), 20, buffer_len, penalty_factor=1.0)
