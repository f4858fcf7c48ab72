"""A multi-turn rollout fed bad input: tools that raise, hang or return megabytes, environments whose reward is NaN,
a string or an exception, whose reset or done raises, malformed calls. Each episode goes on or ends with a reason,
the counts reach the batch and the metrics, and `generate` returns.

The engine is `ScriptedEngine` (fixed turns on the embedded tiny tokenizer): what is pinned is the loop around it.
The last test runs `recipezoo train` on the random tiny model with an environment whose reward misbehaves.
"""

from __future__ import annotations

import math
import threading
import time

import pytest

from core.cli import main as cli_main
from core.data.turn_template import TurnTemplate
from core.models.tiny import build_tiny_tokenizer
from core.reward.manager import RewardManager, reward_metrics, too_many_errors
from core.rollout.base import SamplingParams
from core.rollout.multi_turn.loop import MultiTurnRollout, MultiTurnSettings
from core.rollout.multi_turn.tools import ToolSpec
from core.trainer.metrics import multi_turn_metrics
from tests.test_multi_turn import ScriptedEngine, one_prompt
from tests.test_multi_turn_training import logged_metrics, run_overrides, tool_model_dir  # noqa: F401 (fixture)

BAD_TOOLS = '''
import time


def explode(x: str) -> str:
    """Raises.

    Args:
        x: Anything.
    """
    raise RuntimeError("kaboom")


def hang(x: str) -> str:
    """Never returns in time.

    Args:
        x: Anything.
    """
    time.sleep(30)
    return "late"


def flood(x: str) -> str:
    """Five megabytes.

    Args:
        x: Anything.
    """
    return "y" * 5_000_000


def leave(x: str) -> str:
    """Calls sys.exit.

    Args:
        x: Anything.
    """
    raise SystemExit(3)
'''

BAD_ENV = '''
class Env:
    def reset(self, row):
        self.kind = row["extra_info"]["kind"]
        if self.kind == "reset_raises":
            raise KeyError("no such puzzle")

    @property
    def done(self):
        if self.kind == "done_raises" and getattr(self, "poked", False):
            raise RuntimeError("done broke")
        return False

    def poke(self, x: str) -> str:
        """Poke.

        Args:
            x: Anything.
        """
        self.poked = True
        return "poked"

    def reward(self):
        if self.kind == "raises":
            return 1 / 0
        return {"nan": float("nan"), "string": "abc", "inf": float("inf")}.get(self.kind, 1.0)

    def close(self):
        raise OSError("close broke")
'''


@pytest.fixture(scope="module")
def tokenizer():
    return build_tiny_tokenizer("<>")


@pytest.fixture(scope="module")
def bad_tools(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("bad") / "bad_tools.py"
    path.write_text(BAD_TOOLS)
    return str(path)


def rollout_of(tokenizer, spec: ToolSpec, turns: list[str], **settings) -> MultiTurnRollout:
    engine = ScriptedEngine(tokenizer, turns, tokenizer.eos_token_id)
    return MultiTurnRollout(engine, tokenizer, spec, MultiTurnSettings(action_format="tags", check_template=True,
                                                                      max_response_length=400, **settings),
                            TurnTemplate(tokenizer))


def test_a_tool_that_raises_or_exits_is_an_error_the_model_reads(tokenizer, bad_tools):
    spec = ToolSpec([f"{bad_tools}:explode", f"{bad_tools}:leave"], None)
    rollout = rollout_of(tokenizer, spec, ["<explode>1</explode>", "<leave>1</leave>", "#### 1"])
    batch = rollout.generate(one_prompt(tokenizer, rollout.template), SamplingParams(n=1))
    assert list(batch["multi_turn_stop_reason"]) == ["stop"] and list(batch["tool_errors"]) == [2]
    prompts = [call[0][0] for call in rollout.engine.calls]
    assert "error: RuntimeError: kaboom" in tokenizer.decode(prompts[1])
    assert "error: SystemExit: 3" in tokenizer.decode(prompts[2])


def test_a_tool_that_hangs_times_out_and_the_episode_goes_on(tokenizer, bad_tools):
    rollout = rollout_of(tokenizer, ToolSpec([f"{bad_tools}:hang"], None), ["<hang>1</hang>", "#### 1"],
                         tool_timeout_s=0.5)
    start = time.monotonic()
    batch = rollout.generate(one_prompt(tokenizer, rollout.template), SamplingParams(n=2))
    assert time.monotonic() - start < 3.0  # two hung calls side by side, each given 0.5 s, not 30
    assert list(batch["tool_timeouts"]) == [1, 1] and list(batch["multi_turn_stop_reason"]) == ["stop", "stop"]
    assert "error: the tool did not return within 0.5 s" in tokenizer.decode(rollout.engine.calls[1][0][0])
    assert multi_turn_metrics(batch.non_tensors)["tool/timeouts"] == 1.0
    hung = [thread for thread in threading.enumerate() if thread.name == "tool" and thread.is_alive()]
    assert hung and all(thread.daemon for thread in hung)  # left running, but never holding up the trainer's exit


def test_a_tool_that_returns_megabytes_is_cut_and_the_episode_stays_in_budget(tokenizer, bad_tools):
    rollout = rollout_of(tokenizer, ToolSpec([f"{bad_tools}:flood"], None), ["<flood>1</flood>", "#### 1"],
                         max_tool_response_chars=200)
    batch = rollout.generate(one_prompt(tokenizer, rollout.template), SamplingParams(n=1))
    observation = tokenizer.decode(rollout.engine.calls[1][0][0])
    assert "... 4999800 characters cut ..." in observation and observation.count("y") == 200  # ([ is not in the vocab)
    assert list(batch["multi_turn_stop_reason"]) == ["stop"] and list(batch["template_mismatch"]) == [0]


def test_malformed_calls_are_errors_and_the_episode_goes_on(tokenizer, bad_tools):
    spec = ToolSpec([f"{bad_tools}:explode"], None)
    turns = ["<explode>never closed", "#### 1"]
    rollout = rollout_of(tokenizer, spec, turns)
    batch = rollout.generate(one_prompt(tokenizer, rollout.template), SamplingParams(n=1))
    assert list(batch["tool_errors"]) == [1] and list(batch["multi_turn_stop_reason"]) == ["stop"]
    assert "malformed tool call: <explode> is never closed" in tokenizer.decode(rollout.engine.calls[1][0][0])


@pytest.mark.parametrize("kind, stop_reason, error", [
    ("nan", "env_done", "environment reward() returned nan (float); expected a finite number"),
    ("inf", "env_done", "environment reward() returned inf (float); expected a finite number"),
    ("string", "env_done", "environment reward() returned 'abc' (str); expected a finite number"),
    ("raises", "env_done", "environment reward() raised ZeroDivisionError: division by zero"),
    ("reset_raises", "env_error", "environment reset failed: KeyError: 'no such puzzle'"),
    ("done_raises", "env_error", "environment done failed: RuntimeError: done broke"),
])
def test_an_environment_that_misbehaves_scores_zero_with_its_reason(tokenizer, tmp_path, kind, stop_reason, error):
    env_file = tmp_path / "bad_env.py"
    env_file.write_text(BAD_ENV.replace("return False", "return True") if kind != "done_raises" else BAD_ENV)
    rollout = rollout_of(tokenizer, ToolSpec([], f"{env_file}:Env"), ["<poke>1</poke>", "#### 1"])
    prompts = one_prompt(tokenizer, rollout.template)
    prompts.non_tensors["extra_info"][0] = {"kind": kind}
    batch = rollout.generate(prompts, SamplingParams(n=1))  # close() raising too: logged, not raised
    assert list(batch["multi_turn_stop_reason"]) == [stop_reason]
    assert list(batch["env_reward"]) == [0.0] and list(batch["env_reward_error"]) == [error]
    scores, info = RewardManager(tokenizer)(batch)
    assert scores.sum().item() == 0.0 and info["error"] == [error] and info["acc"] == [0.0]
    assert reward_metrics(info)["reward/error_count"] == 1.0
    assert too_many_errors(RewardManager(tokenizer), ["test"], info, 0.5).startswith(
        "the reward function of rollout.multi_turn.env failed on 1 of 1 rows")
    if kind == "reset_raises":
        assert rollout.engine.calls == [] and list(batch["multi_turn_turns"]) == [0]


def test_a_good_reward_beside_bad_ones_keeps_its_score(tokenizer, tmp_path):
    env_file = tmp_path / "bad_env.py"
    env_file.write_text(BAD_ENV.replace("return False", "return True"))
    rollout = rollout_of(tokenizer, ToolSpec([], f"{env_file}:Env"), ["<poke>1</poke>"])
    prompts = one_prompt(tokenizer, rollout.template).repeat(2)
    prompts.non_tensors["extra_info"][:] = [{"kind": "fine"}, {"kind": "nan"}]
    batch = rollout.generate(prompts, SamplingParams(n=1))
    scores = [value for value in batch["env_reward"]]
    assert scores == [1.0, 0.0] and not any(math.isnan(value) for value in scores)


def test_a_run_whose_environment_reward_is_nan_trains_on_and_counts_it(tool_model_dir, tmp_path):  # noqa: F811
    env_file = tmp_path / "nan_env.py"
    env_file.write_text('''
import itertools

EPISODES = itertools.count()


class Env:
    def reset(self, row):
        self.episode = next(EPISODES)

    def calc(self, expression: str) -> str:
        """Multiply.

        Args:
            expression: a*b.
        """
        return "0"

    def reward(self):
        return float("nan") if self.episode % 2 else 0.5
''')
    overrides = run_overrides(tool_model_dir, tmp_path, "rollout.multi_turn.tools=[]",
                              f"rollout.multi_turn.env={env_file}:Env", "reward.max_error_frac=1.0")
    assert cli_main(["train", "--recipe", "grpo", *overrides]) == 0
    metrics = logged_metrics(tmp_path)
    # Every other episode's reward is NaN: 4 of a step's 8 score 0 with the reason, the other 4 score 0.5.
    assert metrics["reward/error_count"] == 4.0 and metrics["critic/score/mean"] == pytest.approx(0.25)
