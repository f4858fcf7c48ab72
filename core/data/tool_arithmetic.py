"""`recipezoo data tool-arithmetic`: arithmetic where the tool decides the answer, as verl-schema parquet.

    recipezoo data tool-arithmetic --size 2000 --test-size 200 --seed 0 --out data/tool_arithmetic \
        [--difficulty min_digits=4 max_digits=6]

Three kinds of problem, in turn: the product of two numbers (`48213 * 7719`), a compound expression of two
products (`4821 * 3377 - 90211 * 5123`), and an exact division of a large number (`372149283 / 48211`), every
number drawn with `min_digits`..`max_digits` digits (4..6 by default: beyond a 0.5B model's head). The prompt offers
the tool (the recipe picks it: the calculator or the sandboxed Python tool) and asks for the exact integer inside
`\\boxed{}`; rows are scored by math_verify on the last box (data_source `tool_arithmetic`, core/reward/manager.py).
Train and test problems are disjoint by a hash of the expression, and each split draws from its own seed stream.
"""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

from core.data.rows import write_rows

DATA_SOURCE = "tool_arithmetic"
KINDS = ("product", "compound", "division")
DIGITS = {"min_digits": 4, "max_digits": 6}
MAX_DIGITS = 12  # beyond it the division's dividend (up to twice as many digits) stops being readable
INSTRUCTION = ("The numbers are too large to compute reliably in your head: use your tool to compute it. "
               "Put the exact integer result, digits only, within \\boxed{}.")
TEST_SEED_OFFSET = 1_000_003
POOL_FACTOR = 4  # draws per wanted row before giving up on distinct ones


def parse_difficulty(items: list[str]) -> dict[str, int]:
    """`KEY=VALUE` items -> {min_digits, max_digits}; any other key, a non-integer or a bad range is one line."""
    digits = dict(DIGITS)
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or key not in DIGITS:
            raise ValueError(f"--difficulty {item!r}: expected KEY=VALUE with KEY one of {list(DIGITS)}, "
                             "e.g. max_digits=5")
        try:
            digits[key] = int(text)
        except ValueError:
            raise ValueError(f"--difficulty {item!r}: {text!r} is not an integer number of digits") from None
    low, high = digits["min_digits"], digits["max_digits"]
    if not 1 <= low <= high <= MAX_DIGITS:
        raise ValueError(f"--difficulty min_digits={low} max_digits={high}: expected 1 <= min_digits <= max_digits "
                         f"<= {MAX_DIGITS}")
    return digits


def check_counts(size: int, test_size: int, seed: int) -> None:
    for flag, value in (("--size", size), ("--test-size", test_size)):
        if value < 1:
            raise ValueError(f"{flag}={value}: expected a positive number of rows")
    if seed < 0:
        raise ValueError(f"--seed={seed}: expected a non-negative integer")


def draw(rng: random.Random, kind: str, digits: dict[str, int]) -> tuple[str, int]:
    """(expression, exact integer value) of one problem of `kind`."""
    def number() -> int:
        length = rng.randint(digits["min_digits"], digits["max_digits"])
        return rng.randint(10 ** (length - 1) if length > 1 else 0, 10 ** length - 1)

    if kind == "product":
        a, b = number(), number()
        return f"{a} * {b}", a * b
    if kind == "compound":
        a, b, c, d = number(), number(), number(), number()
        if rng.random() < 0.5:
            return f"{a} * {b} + {c} * {d}", a * b + c * d
        return f"{a} * {b} - {c} * {d}", a * b - c * d
    quotient, divisor = number(), max(number(), 2)  # a divisor of 0 or 1 leaves nothing to compute
    return f"{quotient * divisor} / {divisor}", quotient


def split_of(expression: str, test_fraction: float = 0.2) -> str:
    digest = hashlib.sha256(f"tool_arithmetic {expression}".encode()).digest()
    return "test" if digest[0] < 256 * test_fraction else "train"


def problems(split: str, count: int, seed: int, digits: dict[str, int]) -> list[tuple[str, str, int]]:
    """`count` distinct (kind, expression, value) of `split`, the kinds in turn; the same arguments, the same rows."""
    rng = random.Random(seed + (TEST_SEED_OFFSET if split == "test" else 0))
    chosen: dict[str, tuple[str, str, int]] = {}
    for _ in range(count * POOL_FACTOR * 5):  # 5: the split hash keeps about a fifth (test) of the draws
        if len(chosen) == count:
            break
        kind = KINDS[len(chosen) % len(KINDS)]
        expression, value = draw(rng, kind, digits)
        if split_of(expression) == split and expression not in chosen:
            chosen[expression] = (kind, expression, value)
    if len(chosen) < count:
        flag = "--size" if split == "train" else "--test-size"
        raise ValueError(f"{flag}={count}: only {len(chosen)} distinct {split} problems with {digits}; lower {flag} "
                         "or raise --difficulty max_digits")
    return list(chosen.values())


def make_row(kind: str, expression: str, value: int, index: int, split: str, digits: dict[str, int],
             instruction: str = INSTRUCTION) -> dict:
    question = f"What is {expression}?"
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": f"{question} {instruction}" if instruction else question}],
        "ability": "tool_use",
        "reward_model": {"style": "rule", "ground_truth": str(value)},
        "extra_info": {"split": split, "index": index, "kind": kind, "expression": expression, **digits},
    }


def make_rows(split: str, count: int, seed: int, digits: dict[str, int] | None = None,
              instruction: str = INSTRUCTION) -> list[dict]:
    digits = dict(DIGITS) if digits is None else digits
    chosen = problems(split, count, seed, digits)
    return [make_row(*problem, index, split, digits, instruction) for index, problem in enumerate(chosen)]


def write_from_args(args) -> list[tuple[Path, int]]:
    """`recipezoo data tool-arithmetic`'s files: every flag is checked before anything is written."""
    digits = parse_difficulty(args.difficulty or [])
    check_counts(args.size, args.test_size, args.seed)
    counts = {"train": args.size, "test": args.test_size}
    if args.split is not None and args.split not in counts:
        raise ValueError(f"--split={args.split}: expected one of {list(counts)} (default: both)")
    instruction = INSTRUCTION if args.instruction is None else args.instruction
    splits = counts if args.split is None else {args.split: counts[args.split]}
    rows = {split: make_rows(split, count, args.seed, digits, instruction) for split, count in splits.items()}
    return [(write_rows(split_rows, Path(args.out) / f"{split}.parquet"), len(split_rows))
            for split, split_rows in rows.items()]
