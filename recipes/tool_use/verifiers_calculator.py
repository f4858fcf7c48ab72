"""The calculator task written as a `verifiers` (v1) environment: a taskset, a toolset and a rubric of its own.

The same problems as `embedded://calculator` ("What is 4821*37?"), the same `calc` tool, but in verifiers' API: a
`Taskset` yielding `Task`s, a `Toolset` whose `@vf.tool` is the calculator, an async `@vf.reward` reading the last
reply, and a `@vf.stop` that ends the episode once the model has written its answer. Trained through
`rollout.multi_turn.env=verifiers:recipes.tool_use.verifiers_calculator:CalculatorTaskset` with
`data.train_files=verifiers://recipes.tool_use.verifiers_calculator:CalculatorTaskset` (docs/tool-use.md,
"Environments from verifiers", has the command).
"""

from __future__ import annotations

import re

import verifiers.v1 as vf

from core.data import calculator

ANSWER = re.compile(r"####\s*(-?\d+)")


class CalculatorToolset(vf.Toolset):
    TOOL_PREFIX = None  # the tool is `calc`, as the embedded task's prompts and warm start have it

    @vf.tool
    def calc(self, expression: str) -> str:
        """Compute an arithmetic expression of two integers, e.g. 4821*37 (one of + - *)."""
        return calculator.calc(expression)


class CalculatorData(vf.TaskData):
    answer: str


class CalculatorTask(vf.Task[CalculatorData]):
    @classmethod
    def toolsets(cls, config: vf.TaskConfig) -> list[vf.Toolset]:
        return [CalculatorToolset(vf.ToolsetConfig())]

    @vf.reward
    async def correct(self, task: CalculatorData, trace: vf.Trace) -> float:
        """1 when the last reply's `#### N` is the product."""
        match = ANSWER.search(trace.last_reply)
        return float(match is not None and match.group(1) == task.answer)

    @vf.stop
    async def answered(self, trace: vf.Trace) -> bool:
        return ANSWER.search(trace.last_reply) is not None


class CalculatorTaskset(vf.Taskset[CalculatorTask]):
    """64 training problems of the embedded task (seeded, so every process yields the same)."""

    size = 64
    split = "train"

    def load(self):
        for a, b in calculator.problems(self.split, self.size, seed=1):
            yield CalculatorTask(CalculatorData(prompt=f"What is {a}*{b}?", answer=str(a * b)), self.config.task)


class CalculatorTestTaskset(CalculatorTaskset):
    """Held-out problems (disjoint from the training ones by `calculator.split_of`)."""

    size = 32
    split = "test"
