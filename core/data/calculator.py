"""The embedded tool-use task: products a two-layer model cannot compute, and a calculator it can call.

"What is 4821*37?" (a 3–4-digit number times a 2-digit one: 4–6-digit products). The tiny model has no chance of
multiplying in its head; with the `calc` tool it only has to copy the operands into `<calc>4821*37</calc>` and the
tool's reply into `#### 178377`. Rows follow verl's schema with a GSM8K-style answer, scored by the GSM8K scorer.
Train and test problems are disjoint by a hash of their operands.
"""

from __future__ import annotations

import hashlib
import random
import re

DATA_SOURCE = "calculator"
LEFT, RIGHT = (100, 9999), (10, 99)  # operand ranges
TOOL_CALL = "<calc>{a}*{b}</calc>"
EXPRESSION = re.compile(r"\s*(-?\d{1,12})\s*([-+*])\s*(-?\d{1,12})\s*")


def calc(expression: str) -> str:
    """Compute an arithmetic expression of two integers.

    Args:
        expression: Two integers and an operator between them, e.g. 4821*37 (one of + - *).
    """
    match = EXPRESSION.fullmatch(expression)
    if not match:
        raise ValueError(f"cannot read {expression!r}: expected two integers and one of + - *, like 4821*37")
    a, op, b = int(match.group(1)), match.group(2), int(match.group(3))
    return str(a * b if op == "*" else a + b if op == "+" else a - b)


def split_of(a: int, b: int, test_fraction: float = 0.2) -> str:
    digest = hashlib.sha256(f"calc{a}*{b}".encode()).digest()
    return "test" if digest[0] < 256 * test_fraction else "train"


def problems(split: str, count: int, seed: int) -> list[tuple[int, int]]:
    rng, chosen = random.Random(seed), {}
    while len(chosen) < count:
        a, b = rng.randint(*LEFT), rng.randint(*RIGHT)
        if split_of(a, b) == split:
            chosen[(a, b)] = None
    return list(chosen)


def make_row(a: int, b: int, index: int, split: str) -> dict:
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": f"What is {a}*{b}?"}],
        "ability": "tool_use",
        "reward_model": {"style": "rule", "ground_truth": str(a * b)},
        "extra_info": {"split": split, "index": index},
    }


def make_rows(split: str, count: int, seed: int) -> list[dict]:
    return [make_row(a, b, i, split) for i, (a, b) in enumerate(problems(split, count, seed))]


def sft_episodes(count: int, seed: int, call_rate: float, copy_rate: float) -> list[tuple]:
    """(prompt messages, assistant turns, tool replies, whether the call is trained) for the warm start.

    A share `call_rate` of episodes calls the calculator and copies its reply into the answer; a share `copy_rate`
    does too, but with the call's first token (the decision to call) left out of the loss: they teach writing the
    call and reading the reply without teaching to call more often. The rest answer at once with a near miss (the
    last two digits wrong), as a model that guesses would. The policy then holds both habits at a low tool-call
    rate, and RL must find that calling the tool pays.
    """
    rng = random.Random(seed + 1)
    episodes = []
    for a, b in problems("train", count, seed):
        prompt = make_row(a, b, 0, "train")["prompt"]
        draw = rng.random()
        if draw < call_rate + copy_rate:
            episodes.append((prompt, [TOOL_CALL.format(a=a, b=b), f"#### {a * b}"], [str(a * b)], draw < call_rate))
        else:
            guess = a * b + rng.choice([-1, 1]) * rng.randint(1, 99)
            episodes.append((prompt, [f"#### {guess}"], [], True))
    return episodes
