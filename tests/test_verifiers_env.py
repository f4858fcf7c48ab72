"""A `verifiers` (v1) taskset as a multi-turn environment (core/rollout/multi_turn/verifiers_env.py), on the example
written with verifiers' API (recipes/tool_use/verifiers_calculator.py): its rows, tools, stop and rubric.

Scripted episodes (`ScriptedEngine`, the embedded tiny tokenizer) pin the bookkeeping with rewards of both values; a
`recipezoo train` run on the random tiny model pins the plumbing of a real run.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("verifiers.v1", reason='verifiers is not installed: pip install "recipezoo[verifiers]"')

from core.cli import main as cli_main  # noqa: E402
from core.config import ConfigError  # noqa: E402
from core.data.turn_template import TurnTemplate  # noqa: E402
from core.data.verifiers_tasks import TASK_KEY, taskset_rows  # noqa: E402
from core.models.tiny import build_tiny_tokenizer  # noqa: E402
from core.reward.manager import RewardManager  # noqa: E402
from core.rollout.base import SamplingParams  # noqa: E402
from core.rollout.multi_turn.loop import MultiTurnRollout, MultiTurnSettings  # noqa: E402
from core.rollout.multi_turn.tools import ToolSpec  # noqa: E402
from tests.test_multi_turn import ScriptedEngine  # noqa: E402
from tests.test_multi_turn_training import logged_metrics, run_overrides, tool_model_dir  # noqa: E402,F401

CALCULATOR = "recipes.tool_use.verifiers_calculator:CalculatorTaskset"


def rollout_of(tokenizer, turns):
    spec = ToolSpec([], f"verifiers:{CALCULATOR}")
    settings = MultiTurnSettings(action_format="tags", check_template=True, max_response_length=200)
    engine = ScriptedEngine(tokenizer, turns, tokenizer.eos_token_id)
    return MultiTurnRollout(engine, tokenizer, spec, settings, TurnTemplate(tokenizer))


def prompts_of(tokenizer, rows):
    from core.data.dataset import PromptItem, collate_prompts

    template = TurnTemplate(tokenizer)
    items = [PromptItem(prompt_ids=template.prompt_ids(row["prompt"]), data_source=row["data_source"],
                        ground_truth="", raw_prompt=row["prompt"], extra_info=row["extra_info"], index=i)
             for i, row in enumerate(rows)]
    return collate_prompts(items, tokenizer.pad_token_id)


def test_rows_carry_the_tasks_and_their_prompts():
    rows = taskset_rows(CALCULATOR)
    assert len(rows) == 64 and rows[0]["data_source"] == "verifiers/CalculatorTaskset"
    data = json.loads(rows[0]["extra_info"][TASK_KEY])
    a, b = map(int, rows[0]["prompt"][0]["content"].removeprefix("What is ").removesuffix("?").split("*"))
    assert data["answer"] == str(a * b) and rows[0]["prompt"] == [{"role": "user", "content": f"What is {a}*{b}?"}]


def test_the_tools_are_the_toolsets_as_mcp_advertises_them():
    (schema,) = ToolSpec([], f"verifiers:{CALCULATOR}").schemas
    assert schema["function"]["name"] == "calc" and schema["function"]["parameters"]["required"] == ["expression"]
    assert schema["function"]["description"].startswith("Compute an arithmetic expression")


@pytest.mark.parametrize("right", [True, False])
def test_an_episode_is_token_exact_and_scored_by_the_tasks_rubric(right):
    tokenizer = build_tiny_tokenizer("<>")
    row = taskset_rows(CALCULATOR)[0]
    a, b = row["prompt"][0]["content"].removeprefix("What is ").removesuffix("?").split("*")
    product = int(a) * int(b)
    answer = product if right else product + 1
    rollout = rollout_of(tokenizer, [f"<calc>{a}*{b}</calc>", f"#### {answer}"])
    batch = rollout.generate(prompts_of(tokenizer, [row]), SamplingParams(n=1))
    assert list(batch["multi_turn_stop_reason"]) == ["stop"] and len(rollout.engine.calls) == 2
    assert list(batch["env_reward"]) == [1.0 if right else 0.0] and list(batch["env_reward_error"]) == [None]
    assert list(batch["template_mismatch"]) == [0] and list(batch["tool_calls"]) == [1]
    assert f"tool\n{product}" in tokenizer.decode(rollout.engine.calls[1][0][0])  # the toolset's reply, verbatim
    scores, info = RewardManager(tokenizer)(batch)  # no scorer for verifiers/...: the rubric's score stands
    assert scores.sum().item() == (1.0 if right else 0.0) and info["error"] == [None]


def test_the_tasks_stop_ends_the_episode_after_the_turns_tool_call():
    tokenizer = build_tiny_tokenizer("<>")
    row = taskset_rows(CALCULATOR)[0]
    answer = json.loads(row["extra_info"][TASK_KEY])["answer"]
    rollout = rollout_of(tokenizer, [f"#### {answer} <calc>1*1</calc>", "never asked for"])
    batch = rollout.generate(prompts_of(tokenizer, [row]), SamplingParams(n=1))
    # @vf.stop `answered` reads the trace after the call: the episode ends there, before a second turn.
    assert list(batch["multi_turn_stop_reason"]) == ["env_done"] and len(rollout.engine.calls) == 1
    assert list(batch["env_reward"]) == [1.0] and list(batch["template_mismatch"]) == [0]


def test_a_tool_error_from_mcp_validation_is_the_observation():
    tokenizer = build_tiny_tokenizer("<>")
    rollout = rollout_of(tokenizer, ["<calc>twelve</calc>", "#### 1"])
    batch = rollout.generate(prompts_of(tokenizer, taskset_rows(CALCULATOR)[:1]), SamplingParams(n=1))
    assert list(batch["tool_errors"]) == [1] and list(batch["multi_turn_stop_reason"]) == ["stop"]
    assert "cannot read 'twelve'" in tokenizer.decode(rollout.engine.calls[1][0][0])


def test_a_row_not_made_from_the_taskset_ends_its_episode_with_the_reason():
    tokenizer = build_tiny_tokenizer("<>")
    row = dict(taskset_rows(CALCULATOR)[0], extra_info={"index": 0})
    batch = rollout_of(tokenizer, []).generate(prompts_of(tokenizer, [row]), SamplingParams(n=1))
    assert list(batch["multi_turn_stop_reason"]) == ["env_error"]
    assert "has no extra_info.verifiers_task; make the data with data.train_files=verifiers://" in \
        batch["env_reward_error"][0]


def test_a_task_that_needs_verifiers_harness_is_refused_in_one_line(tmp_path):
    source = tmp_path / "judged.py"
    source.write_text('''
import verifiers.v1 as vf


class Judged(vf.Task[vf.TaskData]):
    async def setup(self, trace, runtime):
        pass


class JudgedTaskset(vf.Taskset[Judged]):
    def load(self):
        yield Judged(vf.TaskData(prompt="hi"))
''')
    with pytest.raises(ConfigError, match=r"^rollout.multi_turn.env=verifiers:.*judged.py:JudgedTaskset: task Judged "
                                          r"needs a runtime \(setup is overridden\)"):
        ToolSpec([], f"verifiers:{source}:JudgedTaskset")
    with pytest.raises(ConfigError, match=r"is not a verifiers Taskset subclass"):
        ToolSpec([], "verifiers:core.data.calculator:calc")


def test_a_run_trains_on_a_verifiers_taskset(tool_model_dir, tmp_path):  # noqa: F811
    overrides = run_overrides(tool_model_dir, tmp_path, "rollout.multi_turn.tools=[]",
                              f"rollout.multi_turn.env=verifiers:{CALCULATOR}",
                              f"data.train_files=verifiers://{CALCULATOR}",
                              "data.val_files=verifiers://recipes.tool_use.verifiers_calculator:CalculatorTestTaskset")
    assert cli_main(["train", "--recipe", "grpo", *overrides]) == 0
    metrics = logged_metrics(tmp_path)
    assert metrics["multi_turn/template_mismatch"] == 0.0 and metrics["reward/error_count"] == 0.0
    assert "val/verifiers/CalculatorTestTaskset/acc" in metrics and "multi_turn/stop_reason/env_done" in metrics


def test_a_bad_verifiers_data_spec_stops_the_run_before_anything_starts(tool_model_dir, tmp_path, capsys):  # noqa: F811
    overrides = run_overrides(tool_model_dir, tmp_path, "data.train_files=verifiers://nowhere:Tasks")
    assert cli_main(["train", "--recipe", "grpo", *overrides]) == 2
    last_line = capsys.readouterr().err.strip().splitlines()[-1]
    assert "data.train_files='verifiers://nowhere:Tasks': cannot import nowhere" in last_line
    assert not (tmp_path / "out").exists() and not (tmp_path / "m.db").exists()
