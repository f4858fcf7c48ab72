"""reasoning-gym tasks: `recipezoo data reasoning-gym` (real generators, verl-schema parquet, bad input as one
line), the answer extraction, scoring by each task's own verifier, and the reward manager's routing."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("reasoning_gym")

from core.cli import main as recipezoo
from core.data.reasoning_gym import (
    TaskError,
    answer_in_question,
    answer_in_question_share,
    constant_answer,
    parse_difficulty,
    write_suite,
)
from core.data.rows import read_rows
from core.reward.manager import RewardManager
from core.reward.reasoning_gym import compute_score, extract_answer

ONE_DIGIT = ["basic_arithmetic.max_digits=1", "basic_arithmetic.max_terms=2", "basic_arithmetic.operators=[+, -]",
             "basic_arithmetic.allow_negation=false", "basic_arithmetic.allow_parentheses=false"]


def test_writes_train_and_test_in_verl_schema(tmp_path):
    written, _ = write_suite(["basic_arithmetic", "syllogism"], ONE_DIGIT, tmp_path, size=30, test_size=5, seed=0)
    assert [(path.name, count) for path, count in written] == [("train.parquet", 60), ("test.parquet", 10)]
    train, test = read_rows(tmp_path / "train.parquet"), read_rows(tmp_path / "test.parquet")
    assert {row["data_source"] for row in train} == {"reasoning_gym/basic_arithmetic", "reasoning_gym/syllogism"}
    assert train[0]["data_source"] != train[1]["data_source"] or train[1]["data_source"] != train[2]["data_source"]
    row = next(row for row in test if row["data_source"] == "reasoning_gym/basic_arithmetic")
    truth = json.loads(row["reward_model"]["ground_truth"])
    assert truth["task"] == "basic_arithmetic" and row["prompt"][0]["role"] == "user"
    assert row["prompt"][0]["content"].endswith("<answer></answer> tags.")
    assert json.loads(row["extra_info"]["difficulty"]) == {"allow_negation": False, "allow_parentheses": False,
                                                           "max_digits": 1, "max_terms": 2, "operators": ["+", "-"]}
    # every number a single digit, and no test question is also a training question
    assert all(len(term) == 1 for term in truth["metadata"]["expression"].replace("-", "+").split(" + "))
    train_questions = {json.loads(r["reward_model"]["ground_truth"])["question"] for r in train}
    assert not train_questions & {json.loads(r["reward_model"]["ground_truth"])["question"] for r in test}
    again = tmp_path / "again"
    write_suite(["basic_arithmetic", "syllogism"], ONE_DIGIT, again, size=30, test_size=5, seed=0)
    assert read_rows(again / "test.parquet") == test  # fixed seeds: the same files


@pytest.mark.parametrize("argv, expected", [
    (["--tasks", "nope"], "--tasks: unknown reasoning-gym task ['nope']; the "),
    (["--tasks", "syllogism", "--difficulty", "syllogism.foo=1"], "syllogism has no difficulty key 'foo'; its keys are"),
    (["--tasks", "syllogism", "--difficulty", "chain_sum.max_terms=2"], "task 'chain_sum' is not among --tasks"),
    (["--tasks", "syllogism", "--difficulty", "syllogism"], "expected TASK.KEY=VALUE"),
    (["--tasks", "syllogism", "--size", "0"], "--size=0: expected a positive number of rows per task"),
    (["--tasks", "simple_equations", "--difficulty", "simple_equations.operators=[+, -]"],
     "simple_equations with operators=('+', '-'): the generator rejected these settings"),
    (["--tasks", "syllogism", "--size", "10", "--test-size", "100", "--max-constant-share", "0.5"],
     "syllogism: 0.66 of its 100 test answers are 'Yes', above --max-constant-share 0.5"),
    (["--tasks", "syllogism", "--max-constant-share", "10"], "--max-constant-share=10.0: expected a share between 0"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, argv, expected):
    assert recipezoo(["data", "reasoning-gym", "--out", str(tmp_path / "out"), *argv]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], lines
    assert not (tmp_path / "out").exists()


def test_small_tasks_hold_out_their_test_questions(tmp_path):
    # one-digit sums and differences: a few hundred distinct questions; 150 of them for test, the rest for training
    write_suite(["basic_arithmetic"], ONE_DIGIT, tmp_path, size=400, test_size=150, seed=0)
    train, test = read_rows(tmp_path / "train.parquet"), read_rows(tmp_path / "test.parquet")
    assert len(train) == 400 and len({row["prompt"][0]["content"] for row in test}) == 150
    assert not {row["prompt"][0]["content"] for row in train} & {row["prompt"][0]["content"] for row in test}
    with pytest.raises(TaskError, match=r"only \d+ distinct test questions among 2000 drawn"):
        write_suite(["basic_arithmetic"], ONE_DIGIT, tmp_path / "more", size=10, test_size=500, seed=0)


def test_suite_flags_belong_to_reasoning_gym(capsys):
    assert recipezoo(["data", "gsm8k", "--out", "x", "--tasks", "syllogism"]) == 2
    assert "--tasks belong to `recipezoo data reasoning-gym`" in capsys.readouterr().err
    assert recipezoo(["data", "gsm8k", "--out", "x", "--max-constant-share", "0.1"]) == 2
    assert "--max-constant-share belong to `recipezoo data reasoning-gym`" in capsys.readouterr().err


def _rows_answering(*answers) -> list[dict]:
    return [{"reward_model": {"ground_truth": json.dumps({"answer": answer})}} for answer in answers]


def test_constant_answer_is_the_most_common_answers_share():
    assert constant_answer(_rows_answering("7", "3", "7", "1")) == ("7", 0.5)
    assert constant_answer(_rows_answering("No", "Yes")) == ("No", 0.5)  # a tie: the answer met first


def test_syllogism_answers_yes_in_66_of_100(tmp_path, capsys):
    """Counted by hand from the written test.parquet: syllogism at its defaults, seed 0, answers Yes 66 times."""
    _, test_by_task = write_suite(["syllogism"], [], tmp_path, size=10, test_size=100, seed=0)
    answers = [json.loads(row["reward_model"]["ground_truth"])["answer"] for row in read_rows(tmp_path / "test.parquet")]
    assert answers.count("Yes") == 66 and answers.count("No") == 34
    assert constant_answer(test_by_task["syllogism"]) == ("Yes", 0.66)
    assert recipezoo(["data", "reasoning-gym", "--out", str(tmp_path / "cli"), "--tasks", "syllogism", "--size", "10",
                      "--test-size", "100", "--max-constant-share", "0.66"]) == 0  # at the limit: allowed
    last_line = capsys.readouterr().out.splitlines()[-1]
    # every question ends "(Answer Yes or No)": the answer is always in it, and the constant share is the one to read
    assert last_line == ("syllogism: constant-answer share 0.66 (most common test answer 'Yes'); answer in the question "
                         "1.00; its 2 answers: Yes 66, No 34")


def _rows_asking(*pairs) -> list[dict]:
    return [{"reward_model": {"ground_truth": json.dumps({"question": question, "answer": answer})}}
            for question, answer in pairs]


@pytest.mark.parametrize("answer, question, found", [
    ("4", "Calculate 8 - 4.", True),             # a full stop ends the token
    ("4", "Calculate 14 - 10.", False),          # inside a longer number
    ("4", "Simplify the fraction 4/9.", False),  # a fraction's numerator ...
    ("4", "Simplify the fraction 1/4.", False),  # ... or denominator
    ("4", "Round 4.5 down.", False),
    (" 11/17 ", "Simplify the fraction 11/17 to its lowest terms.", True),
    ("11/17", "Simplify the fraction 11/170.", False),
    ("-3", "Solve x + 5 = 2: x = -3?", True),
    ("-3", "Calculate 5-3.", False),
    ("Yes", "Yesterday it rained.", False),
    ("7 + 11", "Calculate 17 + 11.", False),
    ("7 + 11", "Is it 7 + 11, or 11 + 7?", True),
    ("", "Anything.", False),
])
def test_answer_in_question_is_a_whole_token(answer, question, found):
    assert answer_in_question(answer, question) is found


def test_answer_in_question_share_counts_rows():
    rows = _rows_asking(("Simplify 2/9.", "2/9"), ("Simplify 4/18.", "2/9"), ("Add 4 and 10.", "14"),
                        ("Add 10 and 14.", "24"), ("Is 14 > 4/9?", "4"))
    assert answer_in_question_share(rows) == 0.2  # only the first row: 1 of 5


def test_open_suite_fraction_simplification_copies_to_0_21(tmp_path, capsys):
    """21 of the 100 test fractions the open suite draws are already in lowest terms: copying the question's
    fraction scores 0.21, where its trained runs ended (0.18-0.21, results/leaderboard/reasoning_gym_open/leaderboard.md)."""
    from bench.leaderboard.suites import OPEN_SUITE_TASKS, SUITE_SEED, SUITE_TEST_ROWS

    settings = dict(OPEN_SUITE_TASKS)["fraction_simplification"]
    assert recipezoo(["data", "reasoning-gym", "--out", str(tmp_path), "--tasks", "fraction_simplification",
                      "--size", "1", "--test-size", str(SUITE_TEST_ROWS), "--seed", str(SUITE_SEED),
                      "--difficulty", *[f"fraction_simplification.{setting}" for setting in settings]]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "fraction_simplification: constant-answer share 0.05 (most common test answer '1/1'); "
        "answer in the question 0.21")


def test_difficulty_values_are_yaml():
    assert parse_difficulty(["chain_sum.max_terms=3", "chain_sum.allow_negation=false"], ["chain_sum"]) == {
        "chain_sum": {"max_terms": 3, "allow_negation": False}}


def test_a_difficulty_value_yaml_cannot_read_is_one_line_naming_it():
    """An unquoted `*` is a YAML alias: the error names the item and says how to quote it, not a ScannerError."""
    with pytest.raises(TaskError, match=r"^--difficulty 'countdown.operators=\[\+, -, \*\]': '\[\+, -, \*\]' is "
                                        r"not a YAML value .*quote") as caught:
        parse_difficulty(["countdown.operators=[+, -, *]"], ["countdown"])
    assert "\n" not in str(caught.value)
    assert parse_difficulty(['countdown.operators=[+, -, "*"]'], ["countdown"]) == {
        "countdown": {"operators": ("+", "-", "*")}}


@pytest.mark.parametrize("response, answer", [
    ("thinking... <answer>12</answer> more <answer> 7 </answer>", "7"),
    ("8 - 2 = 6", "6"),
    ("Let me see.\n\nThe answer is: False", "False"),
    ("**Answer: 42.**", "42"),
    ("Final answer: Yes", "Yes"),
    ("", ""),
])
def test_extraction(response, answer):
    assert extract_answer(response) == answer


def test_scored_by_the_tasks_own_verifier(tmp_path):
    write_suite(["basic_arithmetic"], ONE_DIGIT, tmp_path, size=5, test_size=3, seed=0)
    row = read_rows(tmp_path / "test.parquet")[0]
    truth = row["reward_model"]["ground_truth"]
    answer = json.loads(truth)["answer"]
    assert compute_score(f"<answer>{answer}</answer>", truth) == {"score": 1.0, "acc": 1.0}
    assert compute_score(f"so it is\n{answer}.", truth)["acc"] == 1.0
    wrong = compute_score(f"<answer>{int(answer) + 1}</answer>", truth)
    assert wrong["acc"] == 0.0 and wrong["score"] < 1.0
    manager = RewardManager(tokenizer=None)
    results = manager.score_texts([f"<answer>{answer}</answer>", "no idea"], [row["data_source"]] * 2, [truth] * 2)
    assert [r["acc"] for r in results] == [1.0, 0.0] and all(r["error"] is None for r in results)


def test_a_verifier_that_never_returns_is_stopped_by_the_pool_the_suites_score_with(tmp_path):
    """countdown's verifier evaluates the answer with sympy: `9**9**9**9` would run for ever in the trainer's
    process (it hung a leaderboard job on a GPU host). The reasoning-gym suites score in worker processes with a
    time limit: that row scores 0 with a timeout error, the next one normally; the GSM8K suite keeps in-process."""
    import bench.leaderboard.driver as driver
    from core.reward.pool import PoolRewardManager

    write_suite(["countdown"], {}, tmp_path, size=5, test_size=3, seed=0)
    row = read_rows(tmp_path / "test.parquet")[0]
    truth = row["reward_model"]["ground_truth"]
    with PoolRewardManager(tokenizer=None, num_workers=1, timeout_s=3) as manager:
        hung, plain = manager.score_texts(["<answer>9**9**9**9</answer>", "<answer>1 + 1</answer>"],
                                          [row["data_source"]] * 2, [truth] * 2)
    assert hung["score"] == 0.0 and hung["error"].startswith("timeout:")
    assert plain["error"] is None and 0.0 < plain["score"] < 1.0  # the verifier's partial credit for a wrong sum
    for suite, pooled in (("reasoning-gym-open", True), ("reasoning-gym", True), ("gsm8k", False)):
        common = driver.run_overrides(driver.parse_args(["--suite", suite, "--model", "m"]), tmp_path, "file:///s", 2048)
        assert ("reward.manager=pool" in common) is pooled


# ---- the leaderboard driver's reasoning-gym suite --------------------------------------------------------------

def test_driver_suite_files_budget_and_model_hash(tmp_path, random_model_dir, capsys):
    """--suite reasoning-gym trains and validates on the suite's files at its own response/prompt budget and tags
    every run with the model file's sha256; --model-sha256 of another file refuses before any data or job."""
    import bench.leaderboard.driver as driver
    from core.models.identity import model_sha256

    args = driver.parse_args(["--suite", "reasoning-gym", "--model", random_model_dir])
    common = driver.run_overrides(args, tmp_path, "file:///store", 2048, "abc")
    assert f"data.train_files={tmp_path / 'reasoning_gym/train.parquet'}" in common
    assert "data.max_response_length=256" in common and "data.max_prompt_length=512" in common
    assert "tracking.experiment=reasoning-gym-leaderboard" in common and "+tracking.tags.model_sha256=abc" in common
    args.model_sha256 = "abc"
    command = driver.job_command(driver.Job("grpo-seed0", "grpo", 0), args, common, tmp_path, 1024, None)
    assert command[command.index("--suite") + 1] == "reasoning-gym" and "--model-sha256" in command
    found = model_sha256(random_model_dir)
    with pytest.raises(SystemExit, match=f"its model file has sha256 {found}, not --model-sha256 {'0' * 64}"):
        driver.main(["--suite", "reasoning-gym", "--model", random_model_dir, "--model-sha256", "0" * 64,
                     "--out", str(tmp_path / "out"), "--data-dir", str(tmp_path / "data")])
    assert not (tmp_path / "data").exists() and not (tmp_path / "out").exists()


def test_open_suite_has_its_own_files_experiment_and_share_limit(tmp_path):
    """reasoning-gym-open and reasoning-gym-coder write their own folders, ask for --max-constant-share 0.1, train and
    log apart from reasoning-gym, whose data command (the one its committed results were made with) stays as it was."""
    import bench.leaderboard.driver as driver
    from bench.leaderboard.suites import SUITES

    path, argv = SUITES["reasoning-gym-open"].data_commands(str(tmp_path), None)[-1]
    assert path == f"{tmp_path}/reasoning_gym_open/train.parquet"
    assert argv[argv.index("--out") + 1] == f"{tmp_path}/reasoning_gym_open"
    assert argv[argv.index("--max-constant-share") + 1] == "0.1"
    old_path, old_argv = SUITES["reasoning-gym"].data_commands(str(tmp_path), None)[-1]
    assert old_path == f"{tmp_path}/reasoning_gym/train.parquet" and "--max-constant-share" not in old_argv
    assert old_argv[old_argv.index("--tasks") + 1:old_argv.index("--size")] == [
        "basic_arithmetic", "chain_sum", "gcd", "calendar_arithmetic", "syllogism", "isomorphic_strings", "mahjong_puzzle"]
    coder_path, coder_argv = SUITES["reasoning-gym-coder"].data_commands(str(tmp_path), None)[-1]
    assert coder_path == f"{tmp_path}/reasoning_gym_coder/train.parquet"
    assert coder_argv[coder_argv.index("--max-constant-share") + 1] == "0.1"
    assert SUITES["reasoning-gym-coder"].experiment == "reasoning-gym-coder-leaderboard"
    args = driver.parse_args(["--suite", "reasoning-gym-open", "--model", "m"])
    common = driver.run_overrides(args, tmp_path, "file:///store", 2048)
    assert f"data.val_files={tmp_path / 'reasoning_gym_open/test.parquet'}" in common
    assert "tracking.experiment=reasoning-gym-open-leaderboard" in common and "data.max_response_length=256" in common


@pytest.mark.parametrize("name", ["reasoning-gym-open", "reasoning-gym-coder"])
def test_open_answer_suites_have_no_answer_above_a_tenth(tmp_path, name):
    """Its 100 test problems a task, as the suite's data command draws them: no answer is more than 10 of them."""
    from bench.leaderboard.suites import SUITES

    suite = SUITES[name]
    difficulty = [f"{task}.{setting}" for task, settings in suite.tasks for setting in settings]
    _, test_by_task = write_suite([task for task, _ in suite.tasks], difficulty, tmp_path, size=1, test_size=100, seed=0)
    shares = [constant_answer(rows)[1] for rows in test_by_task.values()]
    assert max(shares) <= suite.max_constant_share == 0.1


def test_candidate_table_row_per_task(tmp_path):
    """bench/leaderboard/suite_candidates.sh's table: each task's prompts, start accuracy, constant-answer share and
    settings."""
    from bench.leaderboard.suite_candidates_table import candidate_table

    write_suite(["syllogism"], [], tmp_path, size=1, test_size=10, seed=0)
    results = {"protocol": {"generation": {"model": "m", "max_tokens": 256, "rollout": "hf"}},
               "results": {"reasoning_gym/syllogism": {"num_prompts": 10.0, "mean@1": 0.3},
                           "all": {"num_prompts": 10.0, "mean@1": 0.3}}}
    answers = [json.loads(row["reward_model"]["ground_truth"])["answer"] for row in read_rows(tmp_path / "test.parquet")]
    share = max(answers.count("Yes"), answers.count("No")) / 10
    command = "bash bench/leaderboard/suite_candidates.sh m out.json"
    table = candidate_table(results, read_rows(tmp_path / "test.parquet"), command)
    assert table.startswith(f"`{command}`")
    assert f"| syllogism | 10 | 0.30 | {share:.2f} |" in table and "| defaults |" in table


def test_operator_rows_take_products_first():
    from core.data.reasoning_gym import operator_row_value

    assert operator_row_value([2, 3, 4], ("+", "*")) == 14
    assert operator_row_value([2, 3, 4], ("*", "-")) == 2
    assert operator_row_value([5, 3, 2], ("-", "-")) == 0
    assert operator_row_value([7], ()) == 7


def test_fixed_operator_shares_rank_the_rows_of_operators(tmp_path):
    """Hand-made countdown rows: '+ +' solves 2 of 4 (3+4+5=12, 1+1+1=3), '+ *' and '* -' 1 each (2+3*1=5,
    2*3-1=5), every other row none (9 9 9 makes 1 with no row)."""
    from core.data.reasoning_gym import answer_share_lines, fixed_operator_shares, some_operator_row_share

    def row(numbers, target):
        truth = {"answer": "", "question": "", "metadata": {"numbers": numbers, "target": target}}
        return {"reward_model": {"ground_truth": json.dumps(truth)}}

    rows = [row([3, 4, 5], 12), row([1, 1, 1], 3), row([2, 3, 1], 5), row([9, 9, 9], 1)]
    shares = fixed_operator_shares(rows)
    assert shares[0] == ("+ +", 0.5) and set(shares[1:3]) == {("+ *", 0.25), ("* -", 0.25)}
    assert len(shares) == 9 and {share for _, share in shares[3:]} == {0.0}
    assert some_operator_row_share(rows) == 0.75  # all but 9 9 9
    assert fixed_operator_shares([row([3, 4], 7), row([3, 4, 5], 12)]) is None
    assert fixed_operator_shares([{"reward_model": {"ground_truth": json.dumps({"answer": "x"})}}]) is None
    _, test_by_task = write_suite(["countdown"], ["countdown.min_numbers=2", "countdown.max_numbers=2",
                                                  "countdown.max_value=20", "countdown.min_target=1",
                                                  "countdown.max_target=100"],
                                  tmp_path, size=1, test_size=100, seed=0)
    # The open suite's countdown: adding the two numbers solves 0.32, multiplying them 0.27, subtracting 0.18.
    assert answer_share_lines(test_by_task)[0].endswith(
        "one fixed row of operators between the numbers in order: '+' 0.32, '*' 0.27, '-' 0.18 (some row 0.76)")


def test_fixed_role_shares_count_each_pattern_of_knights_and_knaves(tmp_path):
    """Hand-made knights_knaves solutions: knight-knave twice in four, knave-knave and knight-knight once each; then
    the generator at two people: 'knight knave' is the solution of 30 of its 100 test problems (the docstring's)."""
    from core.data.reasoning_gym import answer_share_lines, fixed_role_shares, fixed_shortcut

    def row(solution):
        truth = {"answer": "", "question": "", "metadata": {"names": ["A", "B"], "solution": solution}}
        return {"reward_model": {"ground_truth": json.dumps(truth)}}

    rows = [row([True, False]), row([False, False]), row([True, False]), row([True, True])]
    assert fixed_role_shares(rows) == [("knight knave", 0.5), ("knave knave", 0.25), ("knight knight", 0.25)]
    assert fixed_shortcut(rows)[0].startswith("one fixed pattern of roles")
    assert fixed_role_shares([{"reward_model": {"ground_truth": json.dumps({"answer": "x"})}}]) is None
    _, test_by_task = write_suite(["knights_knaves"], ["knights_knaves.n_people=2", "knights_knaves.depth_constraint=2",
                                                       "knights_knaves.width_constraint=2"],
                                  tmp_path, size=1, test_size=100, seed=0)
    assert answer_share_lines(test_by_task)[0].endswith(
        "one fixed pattern of roles in the order the question names the people: 'knight knave' 0.30, "
        "'knave knight' 0.29, 'knave knave' 0.23, 'knight knight' 0.18")


def test_restating_a_premise_is_a_full_answer_to_propositional_logic(tmp_path):
    """propositional_logic's verifier gives full marks to any valid conclusion that is not a tautology, and a premise
    is one: hand-made premises (P ∧ Q) and P score 1 and 0.25 (a lone variable counts as trivial), so the share is 1/2;
    at 4-6 variables the generator's first premises solve 61 of 100 test problems."""
    from core.data.reasoning_gym import answer_share_lines, premise_copy_share

    def row(premises):
        truth = {"task": "propositional_logic", "answer": None, "question": "",
                 "metadata": {"premises": premises, "variables": ["P", "Q"]}}
        return {"reward_model": {"ground_truth": json.dumps(truth)}}

    assert premise_copy_share([row(["(P ∧ Q)", "Q"]), row(["P", "(P → Q)"])]) == 0.5
    assert premise_copy_share([{"reward_model": {"ground_truth": json.dumps({"answer": "x"})}}]) is None
    _, test_by_task = write_suite(["propositional_logic"], ["propositional_logic.min_vars=4",
                                                            "propositional_logic.max_vars=6"],
                                  tmp_path, size=1, test_size=100, seed=0)
    assert answer_share_lines(test_by_task)[0].endswith("; restating the first premise 0.61; its 1 answers: None 100")
