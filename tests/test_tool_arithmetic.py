"""`recipezoo data tool-arithmetic` (core/data/tool_arithmetic.py): rows pinned by seed, scored by math_verify."""

from __future__ import annotations

import pytest

from core.cli import main as recipezoo
from core.data import tool_arithmetic
from core.data.rows import read_rows
from core.reward import mathverify
from core.reward.manager import RewardManager


def test_seed_0_gives_these_rows_with_their_exact_results():
    train = tool_arithmetic.make_rows("train", 3, seed=0)
    # By hand: 65125*5242 = 65125*5000 + 65125*242 = 325625000 + 15760250; 28316*5104 = 141580000 + 2944864.
    assert [(row["extra_info"]["expression"], row["reward_model"]["ground_truth"]) for row in train] == [
        ("65125 * 5242", "341385250"),
        ("609532 * 49755 - 56930 * 329053", str(30327264660 - 18732987290)),  # 609532*49755, 56930*329053
        ("144524864 / 5104", "28316"),
    ]
    assert 65125 * 5242 == 341385250 and 609532 * 49755 == 30327264660 and 56930 * 329053 == 18732987290
    assert 28316 * 5104 == 144524864
    row = train[0]
    assert row["data_source"] == "tool_arithmetic" and row["prompt"][0]["role"] == "user"
    assert row["prompt"][0]["content"].startswith("What is 65125 * 5242? ") and "\\boxed{}" in row["prompt"][0]["content"]
    assert row["extra_info"] == {"split": "train", "index": 0, "kind": "product", "expression": "65125 * 5242",
                                 "min_digits": 4, "max_digits": 6}
    assert tool_arithmetic.make_rows("train", 3, seed=0) == train
    assert tool_arithmetic.make_rows("train", 3, seed=1) != train


def test_splits_are_disjoint_the_kinds_alternate_and_numbers_have_the_asked_digits():
    digits = {"min_digits": 5, "max_digits": 5}
    train = tool_arithmetic.problems("train", 300, seed=3, digits=digits)
    test = tool_arithmetic.problems("test", 100, seed=3, digits=digits)
    assert not {expression for _, expression, _ in train} & {expression for _, expression, _ in test}
    assert [kind for kind, _, _ in train[:6]] == list(tool_arithmetic.KINDS) * 2
    for kind, expression, value in train:
        numbers = [int(token) for token in expression.split() if token.isdigit()]
        operands = numbers if kind != "division" else [value, numbers[1]]  # the quotient and divisor were drawn
        assert all(len(str(n)) == 5 for n in operands), expression
        assert eval(expression.replace("/", "//")) == value  # exact: the division leaves no remainder
        assert kind != "division" or numbers[0] % numbers[1] == 0


def test_a_boxed_right_answer_scores_1_and_a_near_miss_0_in_training_and_eval():
    manager = RewardManager(tokenizer=None)
    assert manager.scorer_for(tool_arithmetic.DATA_SOURCE) is mathverify.compute_score
    texts = ["The tool says 341385250, so \\boxed{341385250}", "\\boxed{341385251}", "about 341385250 I think."
             " \\boxed{341000000}"]
    rows = manager.score_texts(texts, [tool_arithmetic.DATA_SOURCE] * 3, ["341385250"] * 3)
    assert [row["score"] for row in rows] == [1.0, 0.0, 0.0] and all(row["error"] is None for row in rows)


def test_the_command_writes_train_and_test_parquet(tmp_path, capsys):
    assert recipezoo(["data", "tool-arithmetic", "--size", "9", "--test-size", "4", "--seed", "0",
                      "--out", str(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines() == [f"{tmp_path}/train.parquet: 9 rows", f"{tmp_path}/test.parquet: 4 rows"]
    train = read_rows(tmp_path / "train.parquet")
    assert train[:3] == tool_arithmetic.make_rows("train", 3, seed=0)
    assert read_rows(tmp_path / "test.parquet") == tool_arithmetic.make_rows("test", 4, seed=0)


@pytest.mark.parametrize("flags, message", [
    (["--size", "0"], "--size=0: expected a positive number of rows"),
    (["--test-size", "-2"], "--test-size=-2: expected a positive number of rows"),
    (["--seed", "-1"], "--seed=-1: expected a non-negative integer"),
    (["--difficulty", "max_digits=x"], "--difficulty 'max_digits=x': 'x' is not an integer number of digits"),
    (["--difficulty", "min_digits=7"], "min_digits=7 max_digits=6: expected 1 <= min_digits <= max_digits <= 12"),
    (["--difficulty", "depth=3"], "KEY one of ['min_digits', 'max_digits']"),
    (["--difficulty", "min_digits=1", "max_digits=1", "--size", "500"], "--size=500: only"),
    (["--split", "val"], "--split=val: expected one of ['train', 'test']"),
    (["--tasks", "syllogism"], "--tasks belong to `recipezoo data reasoning-gym`, not tool-arithmetic"),
])
def test_bad_flags_are_one_line_naming_the_flag_and_what_is_accepted(tmp_path, capsys, flags, message):
    assert recipezoo(["data", "tool-arithmetic", "--out", str(tmp_path), *flags]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not list(tmp_path.iterdir())  # nothing written
