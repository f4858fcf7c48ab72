"""RewardManager: decode the valid response, score by data source, put the score on the last valid token."""

import numpy as np
import pytest
import torch

from core.data.batch import Batch
from core.data.dataset import PromptItem, collate_prompts
from core.reward.manager import RewardManager, place_on_last_token
from tests.helpers_tokenizer import build_char_tokenizer

TOKENIZER = build_char_tokenizer()
PAD = TOKENIZER.pad_token_id


def rollout_batch(texts, data_sources, ground_truths, width=None):
    """Right-padded responses (B, T_resp) with their mask, as a rollout backend would return them."""
    ids = [TOKENIZER(t, add_special_tokens=False)["input_ids"] for t in texts]
    width = width or max(len(i) for i in ids)
    responses = torch.full((len(ids), width), PAD, dtype=torch.long)
    response_mask = torch.zeros((len(ids), width), dtype=torch.long)
    for row, row_ids in enumerate(ids):
        responses[row, : len(row_ids)] = torch.tensor(row_ids, dtype=torch.long)
        response_mask[row, : len(row_ids)] = 1
    return Batch(
        {"responses": responses, "response_mask": response_mask},
        {"data_source": np.array(data_sources, dtype=object), "ground_truth": np.array(ground_truths, dtype=object)},
    )


def test_score_lands_on_the_last_valid_token():
    batch = rollout_batch(["#### 72", "so #### 5"], ["gsm8k", "gsm8k"], ["72", "5"], width=12)
    scores, info = RewardManager(TOKENIZER)(batch)
    assert scores.dtype == torch.float32 and scores.shape == (2, 12)
    expected = torch.zeros(2, 12)
    expected[0, 6] = 1.0  # "#### 72" has 7 tokens
    expected[1, 8] = 1.0  # "so #### 5" has 9 tokens
    assert torch.equal(scores, expected)
    assert info["score"] == [1.0, 1.0] and info["acc"] == [1.0, 1.0]


def test_wrong_answer_scores_zero_and_acc_zero():
    batch = rollout_batch(["#### 72", "#### 71"], ["gsm8k", "gsm8k"], ["72", "72"])
    scores, info = RewardManager(TOKENIZER)(batch)
    assert info["score"] == [1.0, 0.0]
    assert info["acc"] == [1.0, 0.0]
    assert scores.sum(dim=1).tolist() == [1.0, 0.0]


def test_masked_out_tokens_are_not_decoded():
    batch = rollout_batch(["#### 72"], ["gsm8k"], ["72"])
    batch.tensors["response_mask"][0, -1] = 0  # the model "said" only "#### 7"
    scores, info = RewardManager(TOKENIZER)(batch)
    assert info["score"] == [0.0]


def test_special_tokens_are_skipped_when_decoding():
    batch = rollout_batch(["#### 72<|im_end|>"], ["gsm8k"], ["72"])
    seen = []
    manager = RewardManager(TOKENIZER, scorers={"gsm8k": lambda text, truth: seen.append(text) or 1.0})
    manager(batch)
    assert seen == ["#### 72"]


def test_empty_response_scores_at_position_zero():
    scores = place_on_last_token(torch.tensor([0.5, 1.0]), torch.tensor([[0, 0, 0], [1, 1, 0]]))
    assert torch.equal(scores, torch.tensor([[0.5, 0.0, 0.0], [0.0, 1.0, 0.0]]))


def test_last_valid_token_ignores_holes_in_the_mask():
    # Multi-turn rollouts mask tool output in the middle; the reward still goes on the last 1.
    scores = place_on_last_token(torch.tensor([1.0]), torch.tensor([[1, 0, 1, 0]]))
    assert torch.equal(scores, torch.tensor([[0.0, 0.0, 1.0, 0.0]]))


def test_gsm8k_aliases_and_arithmetic_use_the_gsm8k_scorer():
    sources = ["gsm8k", "openai/gsm8k", "arithmetic"]
    batch = rollout_batch(["#### 1,234"] * 3, sources, ["1234"] * 3)
    _, info = RewardManager(TOKENIZER)(batch)
    assert info["score"] == [1.0, 1.0, 1.0]


def test_unknown_data_source_names_it_and_the_known_ones():
    batch = rollout_batch(["#### 1"], ["aime"], ["1"])
    with pytest.raises(ValueError, match=r"'aime'.*\['arithmetic', 'gsm8k', 'openai/gsm8k'\]"):
        RewardManager(TOKENIZER)(batch)


def test_default_scorer_scores_unknown_data_sources():
    batch = rollout_batch(["anything"], ["mystery"], ["x"])
    _, info = RewardManager(TOKENIZER, default_scorer=lambda text, truth: 0.25)(batch)
    assert info["score"] == [0.25] and info["acc"] == [0.0]


def test_custom_scorer_may_return_score_and_acc():
    batch = rollout_batch(["abc"], ["mine"], ["abc"])
    manager = RewardManager(TOKENIZER, scorers={"mine": lambda text, truth: {"score": 5.0, "acc": text == truth}})
    scores, info = manager(batch)
    assert info["score"] == [5.0] and info["acc"] == [1.0]
    assert scores[0, 2].item() == 5.0


def test_missing_ground_truth_is_a_contract_error():
    batch = rollout_batch(["#### 1"], ["gsm8k"], ["1"])
    del batch.non_tensors["ground_truth"]
    with pytest.raises(ValueError, match="'ground_truth'"):
        RewardManager(TOKENIZER)(batch)


def test_ground_truth_flows_from_collated_prompts_through_repeat():
    items = [
        PromptItem([5, 6], "arithmetic", "3", [{"role": "user", "content": "1+2"}], {}, 0),
        PromptItem([7], "arithmetic", "9", [{"role": "user", "content": "4+5"}], {}, 1),
    ]
    prompts = collate_prompts(items, PAD).repeat(2, interleave=True)  # a a b b
    answers = ["#### 3", "#### 4", "#### 9", "#### 9"]
    rollout = rollout_batch(answers, list(prompts["data_source"]), list(prompts["ground_truth"]))
    _, info = RewardManager(TOKENIZER)(prompts.union(rollout, stage="rollout"))
    assert info["score"] == [1.0, 0.0, 1.0, 1.0]
