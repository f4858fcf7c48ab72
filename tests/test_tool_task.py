"""The embedded calculator task and its warm start (core/data/calculator.py, core/models/tool_warmstart.py)."""

from __future__ import annotations

import pytest
from transformers.utils import get_json_schema

from core.data import calculator
from core.data.dataset import collate_prompts
from core.data.turn_template import TurnTemplate
from core.models.tiny import build_tiny_tokenizer
from core.models.tool_warmstart import TAG_CHARACTERS, episode_tensors
from core.rollout.base import Completion, RolloutBackend, SamplingParams
from core.rollout.multi_turn.loop import MultiTurnRollout, MultiTurnSettings
from core.rollout.multi_turn.tools import ToolSpec


def test_calc_computes_two_integer_expressions_and_explains_what_it_cannot_read():
    assert calculator.calc("4821*37") == "178377" and calculator.calc(" 12 - 30 ") == "-18"
    with pytest.raises(ValueError, match=r"cannot read '4821\*37\*2': expected two integers"):
        calculator.calc("4821*37*2")
    assert get_json_schema(calculator.calc)["function"]["parameters"]["required"] == ["expression"]


def test_train_and_test_problems_are_disjoint_and_rows_carry_the_product():
    train = set(calculator.problems("train", 500, seed=1))
    test = set(calculator.problems("test", 100, seed=2))
    assert not train & test
    row = calculator.make_row(4821, 37, 0, "test")
    assert row["reward_model"]["ground_truth"] == "178377" and row["data_source"] == "calculator"


def test_warm_start_episodes_hold_few_trained_calls():
    episodes = calculator.sft_episodes(2000, seed=0, call_rate=0.08, copy_rate=0.5)
    calls = [len(turns) == 2 for _, turns, _, _ in episodes]
    trained_calls = [call and trained for (_, _, _, trained), call in zip(episodes, calls)]
    assert 0.54 < sum(calls) / len(calls) < 0.62 and 0.06 < sum(trained_calls) / len(calls) < 0.10


class ReplayEngine(RolloutBackend):
    """Samples the given turns (the warm start's own episode): the rollout must lay them out as the SFT did."""

    def __init__(self, tokenizer, turns):
        self.tokenizer, self.turns, self.calls = tokenizer, turns, 0

    def generate_ids(self, prompt_ids, params, max_new_tokens, stop=()):
        turn = self.turns[self.calls]
        self.calls += 1
        ids = self.tokenizer(turn, add_special_tokens=False)["input_ids"]
        return [Completion(ids if turn.endswith(stop) else ids + [self.tokenizer.eos_token_id], [])]

    def generate(self, prompts, params):
        raise AssertionError("not called")

    def load_weights(self, state_dict):
        pass


def test_the_warm_start_lays_out_an_episode_token_for_token_as_the_rollout_does():
    tokenizer = build_tiny_tokenizer(TAG_CHARACTERS)
    prompt, turns, replies, _ = episode = ([{"role": "user", "content": "What is 4821*37?"}],
                                           ["<calc>4821*37</calc>", "#### 178377"], ["178377"], False)
    ids, loss_mask = episode_tensors(tokenizer, [episode])
    template = TurnTemplate(tokenizer)
    rollout = MultiTurnRollout(ReplayEngine(tokenizer, turns), tokenizer, ToolSpec(["core.data.calculator:calc"],
                               None), MultiTurnSettings(action_format="tags"), template)
    from core.data.dataset import PromptItem

    item = PromptItem(template.prompt_ids(prompt), "calculator", "178377", prompt, {}, 0)
    batch = rollout.generate(collate_prompts([item], tokenizer.pad_token_id), SamplingParams(n=1))
    width = batch["responses"].shape[1]
    rollout_ids = batch["input_ids"][0][batch["attention_mask"][0].bool()].tolist()
    assert ids[0][: len(rollout_ids)].tolist() == rollout_ids
    prompt_length = len(item.prompt_ids)
    response_mask = batch["response_mask"][0][: len(rollout_ids) - prompt_length].tolist()
    sft_mask = loss_mask[0][prompt_length: len(rollout_ids)].tolist()
    # The same tokens are trained, but the first: an untrained call leaves the decision to call out of the loss.
    assert sft_mask[0] == 0 and response_mask[0] == 1 and sft_mask[1:] == response_mask[1:]
    assert width >= len(response_mask)
