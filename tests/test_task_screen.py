"""bench/leaderboard/task_screen.py: each reasoning-gym task at its curriculum's easiest level, and the table that says which
tasks a suite can use. The generation is real (reasoning-gym); the model's accuracies are given, as `recipezoo eval`
(tested on its own) would write them."""

import json

import pytest

pytest.importorskip("reasoning_gym")

from bench.leaderboard.task_screen import BAND, easiest_settings, main, screen_table, write_screen_data
from core.data.reasoning_gym import answer_in_question_share, constant_answer
from core.data.rows import read_rows


def test_the_easiest_level_is_the_curriculums_level_zero_and_generates():
    settings = easiest_settings("basic_arithmetic")
    assert "seed" not in settings and "size" not in settings
    assert settings["max_terms"] == 2  # reasoning-gym's basic_arithmetic curriculum starts at 2 terms
    import reasoning_gym

    assert reasoning_gym.create_dataset("basic_arithmetic", size=2, seed=0, **settings)[0]["answer"]


def test_the_table_marks_a_task_in_band_only_inside_five_to_fifty_percent_without_a_shortcut(tmp_path):
    record = write_screen_data(["basic_arithmetic", "products", "leg_counting"], 20, tmp_path)
    rows = read_rows(tmp_path / "test.parquet")
    accuracy = {"reasoning_gym/basic_arithmetic": 0.30, "reasoning_gym/products": 0.60,
                "reasoning_gym/leg_counting": 0.02}
    results = {"protocol": {"generation": {"model": "m", "max_tokens": 256, "rollout": "hf"}},
               "results": {source: {"mean@1": value} for source, value in accuracy.items()}}
    table = screen_table(results, rows, record, "cmd")
    lines = {line.split(" | ")[1]: line for line in table.splitlines() if line.startswith("| arithmetic |")}
    arithmetic = [row for row in rows if row["extra_info"]["task"] == "basic_arithmetic"]
    shortcut = max(constant_answer(arithmetic)[1], answer_in_question_share(arithmetic))
    assert ("| yes |" in lines["basic_arithmetic"]) == (shortcut <= 0.10)
    assert "| yes |" not in lines["products"]       # above the band's top, BAND[1]
    assert "| yes |" not in lines["leg_counting"]   # below its bottom
    assert BAND == (0.05, 0.50)


def test_countdown_solved_by_one_fixed_row_of_operators_is_not_in_band():
    """Ten problems `n + (n+1) + 1`: distinct answers, none in its question, so only the fixed-operator check sees
    that adding the numbers in order solves every one (the Coder suite's countdown: '+ +' solves 0.44)."""
    rows = []
    for n in range(1, 11):
        numbers, target = [n, n + 1, 1], 2 * n + 2
        truth = {"answer": f"{n} + {n + 1} + 1", "question": f"Using the numbers {numbers}, make {target}.",
                 "metadata": {"numbers": numbers, "target": target}}
        rows.append({"data_source": "reasoning_gym/countdown", "extra_info": {"task": "countdown"},
                     "reward_model": {"ground_truth": json.dumps(truth)}})
    record = {"countdown": {"category": "games", "settings": {"min_numbers": 3}}}
    results = {"protocol": {"generation": {"model": "m", "max_tokens": 256, "rollout": "hf"}},
               "results": {"reasoning_gym/countdown": {"mean@1": 0.30}}}
    line = next(line for line in screen_table(results, rows, record, "cmd").splitlines() if "| countdown |" in line)
    assert constant_answer(rows)[1] == 0.1 and answer_in_question_share(rows) == 0.0
    assert "| 1.00 |" in line and "| yes |" not in line


def test_an_unknown_task_is_named_before_anything_is_written(tmp_path):
    with pytest.raises(SystemExit, match=r"--tasks: unknown reasoning-gym tasks \['no_such_task'\]"):
        main([str(tmp_path / "out"), "--tasks", "leg_counting", "no_such_task"])
    assert not (tmp_path / "out").exists()


def test_a_task_whose_prompts_no_suite_could_train_on_is_skipped_with_its_length(tmp_path):
    record = write_screen_data(["leg_counting", "products"], 3, tmp_path,
                               prompt_tokens=lambda row: 600 if row["extra_info"]["task"] == "products" else 40)
    assert record["products"] == {"skipped": "a prompt of 600 tokens, over the suites' 512"}
    assert {row["extra_info"]["task"] for row in read_rows(tmp_path / "test.parquet")} == {"leg_counting"}


def test_a_task_with_few_distinct_questions_is_screened_on_its_test_problems_alone(tmp_path):
    """products at level 0 has so few questions that no training row differs from 40 test ones: the screen draws
    only test problems, so it screens the task (drawing a training row too once skipped it)."""
    record = write_screen_data(["products"], 40, tmp_path)
    assert "settings" in record["products"]
    assert len(read_rows(tmp_path / "test.parquet")) == 40


def test_from_eval_rebuilds_the_table_without_generating_and_refuses_another_screens_eval(tmp_path):
    """--from-eval reads an earlier screen's eval.json for the same problems (here written by hand: no model runs)
    and writes screen.md with today's columns; one of another model or problem count is refused in one line."""
    earlier = tmp_path / "earlier.json"

    def write_eval(model, prompts):
        earlier.write_text(json.dumps({
            "protocol": {"generation": {"model": model, "max_tokens": 256, "rollout": "vllm"}},
            "results": {"reasoning_gym/leg_counting": {"mean@1": 1 / 3, "num_prompts": prompts}}}))

    argv = [str(tmp_path / "out"), "--model", "embedded://tiny-arith", "--tasks", "leg_counting", "--per-task", "3",
            "--from-eval", str(earlier)]
    write_eval("embedded://tiny-arith", 3)
    assert main(argv) == 0
    table = (tmp_path / "out" / "screen.md").read_text()
    assert "| leg_counting | 3 | 0.33 |" in table and "fixed pattern" in table
    # Rebuilt in its own folder from its own eval.json (copying a file onto itself raised SameFileError).
    assert main([*argv[:-1], str(tmp_path / "out" / "eval.json")]) == 0
    rebuilt = (tmp_path / "out" / "screen.md").read_text()
    assert rebuilt.split("\n", 1)[1] == table.split("\n", 1)[1]  # all but its first line, the command
    write_eval("embedded://tiny-arith", 40)
    with pytest.raises(SystemExit, match=r"reasoning_gym/leg_counting has 40 prompts there and 3 here"):
        main(argv)
    write_eval("pypi://SmolLM2-135M-Instruct", 3)
    with pytest.raises(SystemExit, match=r"model 'pypi://SmolLM2-135M-Instruct', not --model 'embedded://tiny-arith'"):
        main([str(tmp_path / "elsewhere"), *argv[1:]])
    assert not (tmp_path / "elsewhere").exists()  # refused before the problems are drawn
    earlier.write_text("{}")
    with pytest.raises(SystemExit, match=r"model None, not --model 'embedded://tiny-arith' \(no protocol"):
        main(argv)


def test_from_eval_checks_the_problems_by_their_prompts_fingerprint(tmp_path):
    """An evaluation records each task's prompt sha256 (prompt_fingerprints); --from-eval then compares the
    problems themselves, not only their count: the same count from another draw is refused."""
    from core.data.rows import read_rows
    from core.eval.evaluate import prompt_fingerprints

    argv = [str(tmp_path / "out"), "--model", "embedded://tiny-arith", "--tasks", "leg_counting", "--per-task", "3"]
    earlier = tmp_path / "earlier.json"
    earlier.write_text(json.dumps({"protocol": {"generation": {"model": "embedded://tiny-arith"}}, "results": {},
                                   "prompts_sha256": {}}))
    with pytest.raises(SystemExit, match="reasoning_gym/leg_counting's prompts differ from those drawn here"):
        main([*argv, "--from-eval", str(earlier)])
    fingerprints = prompt_fingerprints(read_rows(tmp_path / "out" / "test.parquet"))
    rows = read_rows(tmp_path / "out" / "test.parquet")
    assert prompt_fingerprints([rows[1], rows[0], *rows[2:]]) != fingerprints  # order matters too
    earlier.write_text(json.dumps({
        "protocol": {"generation": {"model": "embedded://tiny-arith", "max_tokens": 256, "rollout": "vllm"}},
        "results": {"reasoning_gym/leg_counting": {"mean@1": 1 / 3, "num_prompts": 3}},
        "prompts_sha256": fingerprints}))
    assert main([*argv, "--from-eval", str(earlier)]) == 0
