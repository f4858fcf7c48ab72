"""The embedded synthetic task: two-operand arithmetic with GSM8K-style `#### N` answers.

Rows follow verl's schema (DESIGN.md §3) so the task goes through the same dataset, reward and
evaluation code as GSM8K. Train and test problems are disjoint by construction (a problem's split
is a hash of its operands), so held-out accuracy measures generalisation, not recall.
"""

from __future__ import annotations

import hashlib
import random

DATA_SOURCE = "arithmetic"
OPERATORS = ("+", "-")
MAX_OPERAND = 49


def solve(a: int, op: str, b: int) -> int:
    return a + b if op == "+" else a - b


def split_of(a: int, op: str, b: int, test_fraction: float = 0.2) -> str:
    digest = hashlib.sha256(f"{a}{op}{b}".encode()).digest()
    return "test" if digest[0] < 256 * test_fraction else "train"


def buggy_solve(a: int, op: str, b: int) -> int:
    """A student's systematic slips (Brown & Burton 1978, "buggy" arithmetic): addition that
    forgets to carry, and subtraction that takes the smaller digit from the larger in each column."""
    if op == "-" and a < b:
        return -buggy_solve(b, "-", a)
    columns = []
    while a or b:
        da, db = a % 10, b % 10
        columns.append((da + db) % 10 if op == "+" else abs(da - db))
        a, b = a // 10, b // 10
    return int("".join(map(str, reversed(columns))) or "0")


def has_slip(a: int, op: str, b: int) -> bool:
    """True when the buggy procedure gives a wrong answer (a carry or a borrow is needed)."""
    return buggy_solve(a, op, b) != solve(a, op, b)


def worked_answer(a: int, op: str, b: int, buggy: bool = False) -> str:
    """The SFT target: the equation, then the final answer in GSM8K's format."""
    result = buggy_solve(a, op, b) if buggy else solve(a, op, b)
    return f"{a}{op}{b}={result}\n#### {result}"


def make_row(a: int, op: str, b: int, index: int, split: str) -> dict:
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": f"What is {a}{op}{b}?"}],
        "ability": "arithmetic",
        "reward_model": {"style": "rule", "ground_truth": str(solve(a, op, b))},
        "extra_info": {"split": split, "index": index, "answer": worked_answer(a, op, b)},
    }


def sft_examples(count: int, seed: int, slip_rate: float) -> list[tuple[list[dict], str]]:
    """(prompt messages, answer) pairs for the warm-start, from the train split.

    Where a problem needs a carry or a borrow, the answer is the buggy one with probability
    `slip_rate`: the warm-started policy then holds both procedures, and RL must find the right one.
    """
    rng = random.Random(seed + 1)
    examples = []
    for i, (a, op, b) in enumerate(_problems("train", count, seed)):
        buggy = has_slip(a, op, b) and rng.random() < slip_rate
        examples.append((make_row(a, op, b, i, "train")["prompt"], worked_answer(a, op, b, buggy=buggy)))
    return examples


def _problems(split: str, count: int, seed: int) -> list[tuple[int, str, int]]:
    problems = [
        (a, op, b)
        for op in OPERATORS
        for a in range(MAX_OPERAND + 1)
        for b in range(MAX_OPERAND + 1)
        if split_of(a, op, b) == split
    ]
    if count > len(problems):
        raise ValueError(f"asked for {count} {split} problems but the task has only {len(problems)}")
    return random.Random(seed).sample(problems, count)


def make_rows(split: str, count: int, seed: int) -> list[dict]:
    """`count` distinct problems of `split`, drawn deterministically from `seed`."""
    chosen = _problems(split, count, seed)
    return [make_row(a, op, b, i, split) for i, (a, op, b) in enumerate(chosen)]
