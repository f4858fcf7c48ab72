"""RewardManager: decode the valid response, score by data source, put the score on the last valid token."""

import logging

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from core.batch import Batch
from core.config import CONFIG_DIR
from core.data.dataset import PromptItem, collate_prompts
from core.reward.build import build_reward_manager
from core.reward.manager import RewardManager, place_on_last_token, reward_metrics
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
    _, info = RewardManager(TOKENIZER)(batch)
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
    with pytest.raises(ValueError, match=r"'aime'.*\['DigitalLearningGmbH/MATH-lighteval', .*'aime24', 'aime25', "
                                         r"'amc23', 'arithmetic', 'calculator', 'gsm8k', .*'openai/gsm8k', "
                                         r"'tool_arithmetic'\]"):
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


def boom(text, truth):
    raise RuntimeError(f"cannot score {text!r}")


def test_a_raising_scorer_scores_zero_and_is_counted_while_other_rows_score(caplog):
    batch = rollout_batch(["#### 1", "bad", "#### 2"], ["gsm8k", "broken", "gsm8k"], ["1", "x", "2"])
    with caplog.at_level(logging.WARNING, logger="core.reward.manager"):
        _, info = RewardManager(TOKENIZER, scorers={"broken": boom})(batch)
    assert info["score"] == [1.0, 0.0, 1.0] and info["acc"] == [1.0, 0.0, 1.0]
    assert info["error"] == [None, "RuntimeError: cannot score 'bad'", None]
    assert reward_metrics(info) == {"reward/error_count": 1.0, "reward/timeout_count": 0.0}
    assert "'broken'" in caplog.text and "cannot score 'bad'" in caplog.text


def test_failure_warnings_stop_after_a_few(caplog):
    manager = RewardManager(TOKENIZER, scorers={"broken": boom})
    with caplog.at_level(logging.WARNING, logger="core.reward.manager"):
        for _ in range(4):
            _, info = manager(rollout_batch(["a", "b"], ["broken", "broken"], ["x", "x"]))
    assert reward_metrics(info)["reward/error_count"] == 2.0  # still counted ...
    assert len(caplog.records) == 5  # ... but logged only MAX_FAILURE_WARNINGS times


def test_a_dict_without_score_is_a_counted_error_that_says_what_to_return():
    batch = rollout_batch(["a"], ["mine"], ["a"])
    _, info = RewardManager(TOKENIZER, scorers={"mine": lambda text, truth: {"acc": 1.0}})(batch)
    assert info["score"] == [0.0] and "return a float or" in info["error"][0]


def reward_cfg(*overrides):
    cfg = OmegaConf.load(CONFIG_DIR / "base.yaml").reward
    for override in overrides:
        key, value = override.split("=")
        OmegaConf.update(cfg, key, value)
    return cfg


def test_gsm8k_method_and_format_score_come_from_the_config():
    batch = rollout_batch(["the answer is 72", "#### 71"], ["openai/gsm8k", "openai/gsm8k"], ["72", "72"])
    _, strict = build_reward_manager(reward_cfg(), TOKENIZER)(batch)
    _, flexible = build_reward_manager(reward_cfg("gsm8k_method=flexible", "format_score=0.1"), TOKENIZER)(batch)
    assert strict["score"] == [0.0, 0.0]
    assert flexible["score"] == [1.0, 0.1]


def test_math_verify_gsm8k_method_reads_the_last_box_and_pays_format_score_for_a_wrong_one():
    texts = ["so \\boxed{1,080}", "\\boxed{3} no, \\boxed{5}", "#### 72", "\\boxed{71}", "\\boxed{72"]
    batch = rollout_batch(texts, ["openai/gsm8k"] * 5, ["1080", "5", "72", "72", "72"])
    _, info = build_reward_manager(reward_cfg("gsm8k_method=math_verify", "format_score=0.1"), TOKENIZER)(batch)
    # The last box counts; `#### 72` has no box, so math_verify reads its final expression; an unclosed box reads nothing.
    assert info["score"] == [1.0, 1.0, 1.0, 0.1, 0.0]


def test_a_first_batch_scoring_zero_everywhere_warns_once_with_the_answer_formats(caplog):
    manager = build_reward_manager(reward_cfg(), TOKENIZER)  # strict: reads only `#### N`
    batch = rollout_batch(["\\boxed{72}", "\\boxed{72}", "it is 72", "no idea"], ["openai/gsm8k"] * 4, ["72"] * 4)
    with caplog.at_level(logging.WARNING, logger="core.reward.manager"):
        manager(batch)
        manager(batch)
    assert len(caplog.records) == 1
    message = caplog.records[0].getMessage()
    assert "method='strict'" in message and "reward.gsm8k_method" in message
    assert "0% ####, 50% \\boxed{}, 75% a last number" in message


def test_a_first_batch_with_any_reward_does_not_warn(caplog):
    batch = rollout_batch(["#### 72", "\\boxed{72}"], ["openai/gsm8k"] * 2, ["72", "72"])
    with caplog.at_level(logging.WARNING, logger="core.reward.manager"):
        build_reward_manager(reward_cfg(), TOKENIZER)(batch)
    assert not caplog.records


@pytest.mark.parametrize("override, message", [("manager=threads", r"reward\.manager='threads'.*'naive', 'pool'"),
                                                ("gsm8k_method=loose", r"reward\.gsm8k_method='loose'.*'math_verify'")])
def test_bad_reward_config_values_name_the_key_and_the_choices(override, message):
    with pytest.raises(ValueError, match=message):
        build_reward_manager(reward_cfg(override), TOKENIZER)
