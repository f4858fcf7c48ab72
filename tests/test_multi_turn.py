"""Multi-turn tool rollouts (core/rollout/multi_turn): token-exact trajectories, the loop's limits, its metrics.

The token invariant is pinned on the real Qwen3 (bench/configs' copy) and SmolLM2 tokenizers and chat templates.
Their engines are scripted (`ScriptedEngine` returns fixed turns): Qwen3's weights are not here, and what is pinned
is the bookkeeping around the engine, not its sampling. Real engines run episodes in test_multi_turn_training.py.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer

from core.batch import Batch
from core.config import ConfigError
from core.data.dataset import collate_prompts
from core.data.turn_template import TurnTemplate, check_template_keeps_turns, matches_full_render
from core.rollout.base import Completion, RolloutBackend, SamplingParams
from core.rollout.multi_turn.actions import parse_hermes_calls, parse_tag_calls
from core.rollout.multi_turn.loop import MultiTurnRollout, MultiTurnSettings, cut_middle
from core.rollout.multi_turn.tools import ToolSpec
from core.trainer.metrics import logprob_diff_metrics, multi_turn_metrics

TOOLS = """
def add(a: int, b: int) -> int:
    \"\"\"Add two integers.

    Args:
        a: The first.
        b: The second.
    \"\"\"
    return a + b


def fail(reason: str) -> str:
    \"\"\"Always raises.

    Args:
        reason: Why.
    \"\"\"
    raise RuntimeError(reason)


def shout(text: str) -> str:
    \"\"\"Upper-case a text.

    Args:
        text: The text.
    \"\"\"
    return text.upper()


def nap(seconds: str) -> str:
    \"\"\"Sleep.

    Args:
        seconds: How long.
    \"\"\"
    import time

    time.sleep(float(seconds))
    return "rested"


def untyped(x):
    return x
"""


class ScriptedEngine(RolloutBackend):
    """Returns each episode's next scripted turn, cut to its budget: the engine's part is not what is tested."""

    def __init__(self, tokenizer, turns: list[str], stop_id: int):
        self.tokenizer, self.turns, self.stop_id, self.calls = tokenizer, turns, stop_id, []

    def generate_ids(self, prompt_ids, params, max_new_tokens, stop=()):
        self.calls.append((prompt_ids, max_new_tokens))
        turn = self.turns[len(self.calls) - 1]
        completions = []
        for budget in max_new_tokens:
            ids = self.tokenizer(turn, add_special_tokens=False)["input_ids"]
            ids = ids if any(turn.endswith(s) for s in stop) else ids + [self.stop_id]
            completions.append(Completion(ids[:budget], [-0.5] * min(len(ids), budget)))
        return completions

    def generate(self, prompts, params):
        raise AssertionError("the multi-turn loop calls generate_ids")

    def load_weights(self, state_dict):
        pass


@pytest.fixture(scope="module")
def tools_file(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("tools") / "my_tools.py"
    path.write_text(TOOLS)
    return str(path)


def one_prompt(tokenizer, template: TurnTemplate, question: str = "What is 2+3?") -> Batch:
    from core.data.dataset import PromptItem

    messages = [{"role": "user", "content": question}]
    item = PromptItem(prompt_ids=template.prompt_ids(messages), data_source="test", ground_truth="5",
                      raw_prompt=messages, extra_info={}, index=0)
    return collate_prompts([item], tokenizer.pad_token_id if tokenizer.pad_token_id is not None
                           else tokenizer.eos_token_id)


def run_episode(tokenizer, tools_file, turns, action_format="chat", max_turns=5, max_response_length=400,
                tools=("add", "fail", "shout"), max_chars=2000, n=1):
    template = TurnTemplate(tokenizer, {"tools": ToolSpec([f"{tools_file}:{t}" for t in tools], None).schemas}
                            if action_format == "chat" else {})
    engine = ScriptedEngine(tokenizer, turns, tokenizer.convert_tokens_to_ids("<|im_end|>"))
    settings = MultiTurnSettings(action_format=action_format, max_turns=max_turns,
                                 max_response_length=max_response_length, check_template=True,
                                 max_tool_response_chars=max_chars)
    rollout = MultiTurnRollout(engine, tokenizer, ToolSpec([f"{tools_file}:{t}" for t in tools], None), settings,
                               template)
    prompts = one_prompt(tokenizer, template)
    return rollout.generate(prompts, SamplingParams(n=n, max_new_tokens=max_response_length)), engine, template


@pytest.mark.parametrize("model", ["qwen3", "smollm2"])
def test_trajectory_ids_equal_a_full_render_and_the_mask_is_exactly_the_sampled_tokens(model, tools_file, request):
    tokenizer = AutoTokenizer.from_pretrained(request.getfixturevalue(f"{model}_tokenizer_dir" if model == "qwen3"
                                                                      else "smollm2_dir"))
    think = "<think>\nok\n</think>\n\n" if model == "qwen3" else ""
    turns = [
        think + '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>',
        think + '<tool_call>\n{"name": "fail", "arguments": {"reason": "boom"}}\n</tool_call>',
        think + '<tool_call>\n{"name": "nope", "arguments": {}}\n</tool_call>',
        think + '<tool_call>\n{"name": "shout", "arguments": {"text": "' + "x" * 300 + '"}}\n</tool_call>',
        think + "The answer is 5.",
    ]
    batch, engine, template = run_episode(tokenizer, tools_file, turns, max_chars=100)
    assert list(batch["multi_turn_stop_reason"]) == ["stop"] and list(batch["multi_turn_turns"]) == [5]
    assert list(batch["tool_errors"]) == [2] and list(batch["template_mismatch"]) == [0]
    # The response's real tokens are the prompt of the last engine call plus the last turn, token for token.
    width = batch["responses"].shape[1]
    response = batch["responses"][0][batch["attention_mask"][0, -width:].bool()].tolist()
    prompt = batch["prompts"][0][batch["attention_mask"][0, :-width].bool()].tolist()
    last_prompt = engine.calls[-1][0][0]
    assert prompt + response[: len(last_prompt) - len(prompt)] == last_prompt
    # The mask is 1 on exactly the scripted turns' tokens, and the rollout log-probs are 0 elsewhere.
    sampled = [tokenizer(t, add_special_tokens=False)["input_ids"] + [engine.stop_id] for t in turns]
    mask = batch["response_mask"][0][: len(response)].tolist()
    assert [tok for tok, m in zip(response, mask) if m] == [tok for turn in sampled for tok in turn]
    assert (batch["rollout_log_probs"][0][batch["response_mask"][0] == 0] == 0).all()
    text = tokenizer.decode(response)
    assert "error: RuntimeError: boom" in text and "unknown tool 'nope'" in text and "characters cut" in text


def test_a_chat_template_that_rewrites_earlier_turns_is_refused_in_one_line(qwen3_tokenizer_dir):
    tokenizer = AutoTokenizer.from_pretrained(qwen3_tokenizer_dir)
    check_template_keeps_turns(TurnTemplate(tokenizer))  # thinking on: past turns keep their <think> blocks
    with pytest.raises(ValueError, match=r"^rollout.multi_turn: the chat template of .* renders earlier turns"):
        check_template_keeps_turns(TurnTemplate(tokenizer, {"enable_thinking": False}))


def test_a_tampered_trajectory_is_counted_as_a_template_mismatch(tools_file):
    from core.models.tiny import build_tiny_tokenizer

    tokenizer = build_tiny_tokenizer("<>")
    template = TurnTemplate(tokenizer)
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}]
    ids = template.prompt_ids(messages[:1]) + template.encode("ok") + [tokenizer.eos_token_id]
    assert matches_full_render(template, messages, ids)
    assert not matches_full_render(template, messages, ids[:-3] + template.encode("ko") + [tokenizer.eos_token_id])


def test_tag_actions_stop_on_their_closing_tag_and_a_cut_call_is_never_run(tools_file):
    from core.models.tiny import build_tiny_tokenizer

    tokenizer = build_tiny_tokenizer("<>")
    batch, engine, _ = run_episode(tokenizer, tools_file, ["<shout>hi</shout>", "#### HI"], action_format="tags",
                                   tools=("shout",))
    assert list(batch["multi_turn_stop_reason"]) == ["stop"] and list(batch["template_mismatch"]) == [0]
    assert "tool\nHI" in tokenizer.decode(engine.calls[1][0][0])
    cut, engine, _ = run_episode(tokenizer, tools_file, ["<shout>" + "a" * 100 + "</shout>"], action_format="tags",
                                 tools=("shout",), max_response_length=20)
    assert list(cut["multi_turn_stop_reason"]) == ["length"] and list(cut["tool_calls"]) == [0]
    assert len(engine.calls) == 1 and engine.calls[0][1] == [20]


def test_max_turns_ends_an_episode_that_keeps_calling(tools_file):
    from core.models.tiny import build_tiny_tokenizer

    tokenizer = build_tiny_tokenizer("<>")
    batch, engine, _ = run_episode(tokenizer, tools_file, ["<shout>a</shout>"] * 3, action_format="tags",
                                   tools=("shout",), max_turns=3)
    assert list(batch["multi_turn_stop_reason"]) == ["max_turns"] and list(batch["tool_calls"]) == [2]
    metrics = multi_turn_metrics(batch.non_tensors)
    assert metrics["multi_turn/num_turns/max"] == 3 and metrics["multi_turn/stop_reason/max_turns"] == 1.0


def test_the_tools_of_a_turn_run_at_once_and_their_wall_time_is_logged(tools_file):
    from core.models.tiny import build_tiny_tokenizer

    tokenizer = build_tiny_tokenizer("<>")
    batch, _, _ = run_episode(tokenizer, tools_file, ["<nap>0.5</nap>", "#### 1"], action_format="tags",
                              tools=("nap",), n=4)
    seconds = multi_turn_metrics(batch.non_tensors)["timing_s/tool"]
    assert list(batch["tool_calls"]) == [1] * 4 and 0.5 <= seconds < 1.5  # four naps of 0.5 s side by side


def test_parsers_read_calls_and_report_malformed_ones():
    assert [c.arguments for c in parse_tag_calls("<calc>1*2</calc> and <calc>3*4</calc>", ["calc"])] == ["1*2", "3*4"]
    assert parse_tag_calls("<calc>1*2", ["calc"])[0].error.startswith("error: malformed tool call")
    calls = parse_hermes_calls('<tool_call>{"name": "add", "arguments": "{\\"a\\": 1}"}</tool_call><tool_call>{x')
    assert calls[0].arguments == {"a": 1} and "never closed" in calls[1].error
    assert "not valid JSON" in parse_hermes_calls("<tool_call>{x}</tool_call>")[0].error


def test_cut_middle_keeps_head_and_tail_and_says_how_much_went():
    assert cut_middle("a" * 10 + "b" * 10, 10) == "aaaaa\n[... 10 characters cut ...]\nbbbbb"
    assert cut_middle("short", 10) == "short"


@pytest.mark.parametrize("tools, env, expected", [
    (["missing.py:f"], None, r"rollout.multi_turn.tools\[0\]='missing.py:f': no file"),
    (["{tools}:untyped"], None, r"rollout.multi_turn.tools\[0\]: tool untyped needs type hints"),
    (["{tools}:nothing"], None, r"has no 'nothing'"),
    ([], "{tools}:add", r"rollout.multi_turn.env=.*expected a class with a reset\(row\) method"),
    ([], None, r"needs tools=\[file.py:function, ...\] or env=file.py:Class"),
])
def test_bad_tools_fail_in_one_line_naming_the_key(tools_file, tools, env, expected):
    with pytest.raises(ConfigError, match=expected):
        ToolSpec([t.format(tools=tools_file) for t in tools], env.format(tools=tools_file) if env else None)


def test_an_environment_scores_its_own_episodes(tmp_path):
    from core.models.tiny import build_tiny_tokenizer
    from core.reward.manager import RewardManager

    env_file = tmp_path / "env.py"
    env_file.write_text('''
class Guess:
    def reset(self, row) -> None:
        self.target, self.done, self.tries = "7", False, 0

    def guess(self, number: str) -> str:
        """Guess the number.

        Args:
            number: The guess.
        """
        self.tries += 1
        self.done = number == self.target
        return "right" if self.done else "wrong"

    def reward(self) -> float:
        return 1.0 if self.done else 0.0
''')
    tokenizer = build_tiny_tokenizer("<>")
    spec = ToolSpec([], f"{env_file}:Guess")
    engine = ScriptedEngine(tokenizer, ["<guess>3</guess>", "<guess>7</guess>"], tokenizer.eos_token_id)
    rollout = MultiTurnRollout(engine, tokenizer, spec, MultiTurnSettings(action_format="tags"), TurnTemplate(tokenizer))
    batch = rollout.generate(one_prompt(tokenizer, TurnTemplate(tokenizer)), SamplingParams(n=1))
    assert list(batch["multi_turn_stop_reason"]) == ["env_done"] and list(batch["env_reward"]) == [1.0]
    scores, info = RewardManager(tokenizer)(batch)  # "test" has no scorer: the environment's reward stands
    assert info["acc"] == [1.0] and scores.sum().item() == 1.0
    assert isinstance(batch.non_tensors["env_reward"], np.ndarray)


def test_tool_files_are_pinned_to_absolute_paths_for_workers_elsewhere(tmp_path, monkeypatch):
    from omegaconf import OmegaConf

    from core.rollout.multi_turn.settings import pin_tool_paths

    monkeypatch.chdir(tmp_path)
    multi_turn = OmegaConf.create({"tools": ["my_tools.py:add", "core.data.calculator:calc"], "env": "env.py:Env"})
    pin_tool_paths(multi_turn)
    assert list(multi_turn.tools) == [f"{tmp_path}/my_tools.py:add", "core.data.calculator:calc"]
    assert multi_turn.env == f"{tmp_path}/env.py:Env"


def test_logprob_diff_is_split_into_the_first_turn_and_the_later_turns():
    # Two responses: [s s o o s s pad] (an observation after two sampled tokens) and [s s s pad pad pad pad].
    mask = torch.tensor([[1, 1, 0, 0, 1, 1, 0], [1, 1, 1, 0, 0, 0, 0]])
    engine = torch.zeros(2, 7)
    trainer = torch.tensor([[0.1, 0.3, 9.0, 9.0, 0.5, 0.7, 9.0], [0.2, 0.2, 0.2, 9.0, 9.0, 9.0, 9.0]])
    batch = Batch({"response_mask": mask, "rollout_log_probs": engine, "old_log_probs": trainer})
    metrics = logprob_diff_metrics(batch)
    # First turns: 0.1, 0.3, 0.2, 0.2, 0.2 -> 1.0 / 5; later turns: 0.5, 0.7 -> 0.6; all seven: 2.2 / 7.
    assert metrics["rollout/logprob_diff/first_turn_mean"] == pytest.approx(0.2)
    assert metrics["rollout/logprob_diff/later_turns_mean"] == pytest.approx(0.6)
    assert metrics["rollout/logprob_diff/mean"] == pytest.approx(2.2 / 7)
    single = logprob_diff_metrics(Batch({"response_mask": mask[1:], "rollout_log_probs": engine[1:],
                                         "old_log_probs": trainer[1:]}))
    assert "rollout/logprob_diff/later_turns_mean" not in single
