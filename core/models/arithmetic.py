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
MAX_OPERAND = 99


def solve(a: int, op: str, b: int) -> int:
    return a + b if op == "+" else a - b


def split_of(a: int, op: str, b: int, test_fraction: float = 0.2) -> str:
    digest = hashlib.sha256(f"{a}{op}{b}".encode()).digest()
    return "test" if digest[0] < 256 * test_fraction else "train"


def worked_answer(a: int, op: str, b: int) -> str:
    """The SFT target: the equation, then the final answer in GSM8K's format."""
    result = solve(a, op, b)
    return f"{a}{op}{b}={result}\n#### {result}"


def make_row(a: int, op: str, b: int, index: int, split: str) -> dict:
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": f"What is {a}{op}{b}?"}],
        "ability": "arithmetic",
        "reward_model": {"style": "rule", "ground_truth": str(solve(a, op, b))},
        "extra_info": {"split": split, "index": index, "answer": worked_answer(a, op, b)},
    }


def make_rows(split: str, count: int, seed: int) -> list[dict]:
    """`count` distinct problems of `split`, drawn deterministically from `seed`."""
    problems = [
        (a, op, b)
        for op in OPERATORS
        for a in range(MAX_OPERAND + 1)
        for b in range(MAX_OPERAND + 1)
        if split_of(a, op, b) == split
    ]
    if count > len(problems):
        raise ValueError(f"asked for {count} {split} problems but the task has only {len(problems)}")
    chosen = random.Random(seed).sample(problems, count)
    return [make_row(a, op, b, i, split) for i, (a, op, b) in enumerate(chosen)]
