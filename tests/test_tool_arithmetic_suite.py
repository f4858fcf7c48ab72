"""`recipezoo leaderboard run --suite tool-arithmetic` (bench/leaderboard/tool_modes.py): each recipe × seed trained with
the Python tool and single-turn on the same problems, the pretrained model evaluated both ways, the format probe first,
the tool figures of `recipezoo eval`, and the tool section of the leaderboard (core/leaderboard/tool_suite.py).

Real parts: the suite's data files, the format probe and the driver end to end run the random tiny Qwen3 model
(tests/conftest.py) on CPU with the HF rollout and the sandboxed Python tool; it learns nothing (that needs a GPU:
docs/tool-use.md), the test checks the plumbing. The section's arithmetic runs on a hand-made export (made-up numbers).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.leaderboard import driver, tool_modes
from bench.leaderboard.bookkeeping import merge_outputs
from bench.leaderboard.suites import NO_TOOL_INSTRUCTION, SUITES, TAGS_TOOL_INSTRUCTION, TOOL_ARITHMETIC_FOLDERS
from core.cli import main as recipezoo
from core.config import load_config
from core.data.rows import read_rows, write_rows
from core.data.tool_arithmetic import INSTRUCTION
from core.eval.evaluate import evaluate
from core.leaderboard.board import build_leaderboard, render_markdown
from core.leaderboard.export import load_export
from core.leaderboard.suite_rank import COMPARED_BUDGET_KEYS
from core.reward.manager import RewardManager

REPO = Path(__file__).resolve().parent.parent
SUITE = SUITES["tool-arithmetic"]
MODEL = "pypi://Qwen2.5-Coder-0.5B-Instruct"
TOOL = f"{MODEL} + python tool"


def make_suite_data(folder: Path) -> Path:
    """The suite's three folders, by the commands the driver runs (in-process: each would import for seconds)."""
    for path, argv in SUITE.data_commands(str(folder), None):
        if not Path(path).is_file():
            assert recipezoo(argv) == 0
    return folder


@pytest.fixture(scope="module")
def suite_data(tmp_path_factory):
    return make_suite_data(tmp_path_factory.mktemp("tool-arithmetic-data"))


def test_the_three_prompt_files_hold_the_same_problems_each_with_its_rollouts_instruction(suite_data):
    files = {rollout: read_rows(suite_data / folder / "test.parquet")
             for rollout, (folder, _) in TOOL_ARITHMETIC_FOLDERS.items()}
    assert [len(rows) for rows in files.values()] == [200, 200, 200]
    problems = {rollout: [(row["extra_info"]["expression"], row["reward_model"]["ground_truth"]) for row in rows]
                for rollout, rows in files.items()}
    assert problems["single"] == problems["chat"] == problems["tags"]
    question = f"What is {problems['single'][0][0]}?"
    assert [rows[0]["prompt"][0]["content"] for rows in files.values()] == [
        f"{question} {NO_TOOL_INSTRUCTION}", f"{question} {INSTRUCTION}", f"{question} {TAGS_TOOL_INSTRUCTION}"]
    assert "tool" not in NO_TOOL_INSTRUCTION and "<python>" in TAGS_TOOL_INSTRUCTION


def test_each_recipe_and_seed_trains_with_the_tool_and_single_turn_under_one_budget(suite_data):
    args = driver.parse_args(["--suite", "tool-arithmetic", "--recipes", "grpo", "rloo", "--seeds", "0", "1",
                              "--eval-before", "--tool-format", "tags", "--model", MODEL, "--data-dir", str(suite_data)])
    args.tool_format_chosen = "tags"
    jobs = driver.wanted_jobs(args)
    assert [(job.name, job.row, job.tool) for job in jobs] == [
        ("pretrained", None, False), ("pretrained-tool", None, True),
        ("grpo-seed0", "grpo", False), ("grpo-tool-seed0", "grpo-tool", True),
        ("rloo-seed0", "rloo", False), ("rloo-tool-seed0", "rloo-tool", True),
        ("grpo-seed1", "grpo", False), ("grpo-tool-seed1", "grpo-tool", True),
        ("rloo-seed1", "rloo", False), ("rloo-tool-seed1", "rloo-tool", True)]
    assert {job.eval_model for job in jobs} == {None, TOOL}
    common = driver.run_overrides(args, suite_data, "file:///tmp/mlruns", 1536)
    single, tool = (driver.job_command(job, args, common, Path("/tmp/out"), 1024, None) for job in jobs[2:4])
    assert "--eval-file" not in single and "rollout.multi_turn.enable=true" not in single
    assert tool[tool.index("--eval-file") + 1] == "tool_arithmetic=tool_arithmetic_tags/test.parquet"
    assert tool[tool.index("--eval-model") + 1] == TOOL
    configs = [load_config(driver.VARIANTS["grpo"], command[command.index("--") + 1:]) for command in (single, tool)]
    assert [config.rollout.multi_turn.enable for config in configs] == [False, True]
    assert configs[1].rollout.multi_turn.format == "tags"
    assert configs[1].rollout.multi_turn.tools == [tool_modes.PYTHON_TOOL]
    assert [Path(config.data.train_files).parent.name for config in configs] == ["tool_arithmetic_plain",
                                                                                "tool_arithmetic_tags"]
    for key in [*COMPARED_BUDGET_KEYS, "actor.lr", "data.val_max_samples", "trainer.seed"]:
        assert len({str(config[key.split(".")[0]][key.split(".")[1]]) for config in configs}) == 1, key


def test_a_tool_format_for_a_suite_without_a_tool_is_one_line_before_anything(capsys, tmp_path):
    with pytest.raises(SystemExit) as stopped:
        driver.main(["--suite", "gsm8k", "--tool-format", "tags", "--out", str(tmp_path / "out")])
    assert stopped.value.code == 2 and not (tmp_path / "out").exists()
    assert "--tool-format tags: suite 'gsm8k' has no tool; expected --suite one of ['tool-arithmetic']" in \
        capsys.readouterr().err


def test_the_format_probe_counts_calls_and_its_choice_is_kept_for_the_reruns(suite_data, random_model_dir, tmp_path):
    from bench.tool_use.format_probe import probe_formats

    folders = {rollout: suite_data / folder / "test.parquet" for rollout, (folder, _) in TOOL_ARITHMETIC_FOLDERS.items()}
    report = probe_formats(random_model_dir, str(folders["chat"]), str(folders["tags"]), prompts=2, max_tokens=8)
    assert {name: counts["samples"] for name, counts in report["formats"].items()} == {"chat": 2, "tags": 2}
    calls = {name: counts["calls"] for name, counts in report["formats"].items()}
    assert report["chosen"] == ("tags" if calls["tags"] > calls["chat"] else "chat")  # a tie: chat
    out = tmp_path / "out"
    out.mkdir()
    (out / tool_modes.PROBE_FILE).write_text(json.dumps({**report, "chosen": "tags"}))
    args = driver.parse_args(["--suite", "tool-arithmetic", "--data-dir", str(suite_data)])
    assert tool_modes.chosen_format(args, SUITE, out, random_model_dir, "") == "tags"  # recorded: no probe runs
    args.tool_format = "chat"
    with pytest.raises(SystemExit, match="--tool-format chat: the tool runs already in .* used tags"):
        tool_modes.chosen_format(args, SUITE, out, random_model_dir, "")
    assert tool_modes.tool_record(out, "tags")["format_probe"]["formats"] == report["formats"]


def test_recipezoo_eval_reports_what_the_episodes_did_with_the_tool(tmp_path):
    rows = [{"data_source": "tool_arithmetic", "prompt": [{"role": "user", "content": "What is 12 * 34?"}],
             "reward_model": {"ground_truth": "408"}, "responses": ["\\boxed{408}", "\\boxed{407}"],
             "episodes": {"multi_turn_turns": [2, 1], "tool_calls": [1, 0], "tool_errors": [1, 0],
                          "tool_timeouts": [0, 0], "multi_turn_stop_reason": ["stop", "no_tool_call"]}},
            {"data_source": "tool_arithmetic", "prompt": [{"role": "user", "content": "What is 2 * 3?"}],
             "reward_model": {"ground_truth": "6"}, "responses": ["\\boxed{6}", "x"],
             "episodes": {"multi_turn_turns": [3, 4], "tool_calls": [2, 3], "tool_errors": [0, 1],
                          "tool_timeouts": [0, 0], "multi_turn_stop_reason": ["stop", "max_turns"]}}]
    report = evaluate([str(write_rows(rows, tmp_path / "responses.parquet"))], RewardManager(None), {})
    figures = report["tool_use"]["tool_arithmetic"]
    # By hand over the 4 episodes: 3 call the tool, (2+1+3+4)/4 turns, (1+0+0+1)/4 errors.
    assert figures["tool_call_rate"] == 0.75 and figures["num_turns"] == 2.5 and figures["tool_errors"] == 0.5
    assert (figures["stop_reason_stop"], figures["stop_reason_no_tool_call"], figures["stop_reason_max_turns"],
            figures["stop_reason_length"]) == (0.5, 0.25, 0.25, 0.0)
    assert report["results"]["tool_arithmetic"]["mean@2"] == 0.5
    assert "tool_use" not in evaluate([str(write_rows([{k: v for k, v in rows[0].items() if k != "episodes"}],
                                                      tmp_path / "plain.parquet"))], RewardManager(None), {})


def eval_entry(run_id, stage, model, value, recipe=None, train_run=None, tools=None):
    figures = {"num_prompts": 200.0, "num_samples": 200.0, "mean@1": value, "score": value, **(tools or {})}
    protocol = {"generation.n": "1", "generation.temperature": "0.0", "generation.top_p": "1.0", "generation.top_k": "0",
                "generation.max_tokens": "512", "generation.max_prompt_length": "1024", "generation.max_samples": "None",
                "generation.rollout": "vllm", "grader.gsm8k_method": "math_verify", "grader.custom_function": "None"}
    return {"run_id": run_id, "run_name": run_id, "stage": stage, "model": model, "recipe": recipe,
            "train_run_id": train_run, "evaluated": model, "seed": 0, "protocol": protocol,
            "results": {"tool_arithmetic": figures}}


def train_run(recipe, seed, tool_s=None):
    params = {"trainer.total_steps": "30", "data.train_batch_size": "32", "rollout.n": "8",
              "data.max_response_length": "512", "data.max_prompt_length": "768", "rollout.temperature": "0.7",
              "actor.lr": "3e-06", "model.path": MODEL, "data.val_files": "tool_arithmetic_plain/test.parquet"}
    return {"run_id": f"{recipe}-{seed}", "run_name": f"{recipe}-seed{seed}", "recipe": recipe, "model": MODEL,
            "seed": seed, "steps": 30, "wall_seconds": 400.0, "generated_tokens": 1000, "sampled_tokens": 1000,
            "step_seconds": 9.0, "stage_seconds": {"gen": 3.0, **({"tool": tool_s} if tool_s else {})},
            "logprob_diff": {"mean": 0.01, "max": 0.5, **({"first_turn_mean": 0.01, "later_turns_mean": 0.02}
                                                          if tool_s else {})},
            "params": params, "final": {}, "history": {}, "tags": {"after_eval": "done"}}


def test_the_tool_section_compares_each_tool_row_with_its_single_turn_row_by_hand():
    """GRPO with the tool at 0.6 and 0.7, single-turn at 0.1 and 0.2; the pretrained model 0.02 alone, 0.05 with
    the tool. Welch by hand: each variance/n = 0.005/2, t = 0.5/√0.005 = 7.071, df = 2, and for df = 2 the two-sided
    p = 1 − t/√(2 + t²) = 1 − 7.071/7.211 = 0.0194."""
    runs = [train_run("grpo-tool", 0, 1.5), train_run("grpo-tool", 1, 2.5), train_run("grpo", 0), train_run("grpo", 1)]
    tools = [{"tool_call_rate": 0.9, "num_turns": 2.0, "tool_errors": 0.1, "stop_reason_stop": 0.8,
              "stop_reason_length": 0.2, "stop_reason_max_turns": 0.0},
             {"tool_call_rate": 1.0, "num_turns": 2.2, "tool_errors": 0.3, "stop_reason_stop": 1.0,
              "stop_reason_length": 0.0, "stop_reason_max_turns": 0.0}]
    evals = [eval_entry("b", "before", MODEL, 0.02),
             eval_entry("bt", "before", TOOL, 0.05, tools={"tool_call_rate": 0.3, "num_turns": 1.3, "tool_errors": 0.2}),
             eval_entry("t0", "after", TOOL, 0.6, "grpo-tool", "grpo-tool-0", tools[0]),
             eval_entry("t1", "after", TOOL, 0.7, "grpo-tool", "grpo-tool-1", tools[1]),
             eval_entry("s0", "after", MODEL, 0.1, "grpo", "grpo-0"),
             eval_entry("s1", "after", MODEL, 0.2, "grpo", "grpo-1")]
    board = build_leaderboard({"schema": 1, "experiment": "tool-arithmetic-leaderboard", "runs": runs, "evals": evals})
    (suite,) = board.tool_suites
    assert (suite.model, suite.start, suite.tool_start) == (MODEL, 0.02, 0.05)
    tool_row, single_row = suite.rows
    assert (tool_row.row.recipe, tool_row.tool, single_row.row.recipe, single_row.tool) == ("grpo-tool", True,
                                                                                           "grpo", False)
    from core.leaderboard.tool_suite import stop_reasons, versus_single

    versus = versus_single(suite, tool_row)
    assert versus["points"] == pytest.approx(50.0) and versus["p"] == pytest.approx(1 - 7.0711 / 7.2111, abs=1e-4)
    assert versus_single(suite, single_row) is None
    assert stop_reasons(tool_row) == pytest.approx({"stop": 0.9, "length": 0.1}) and stop_reasons(single_row) == {}
    assert suite.ranking.ranks == {"grpo-tool": 1, "grpo": 2}
    page = render_markdown(board, "runs.json", "out")
    assert f"## With the Python tool and single-turn, pretrained model `{MODEL}`" in page
    assert ("| grpo-tool | Python tool | 2 | 1 | 0.020 → 0.650 ± 0.071 [0.015, 1.285] | +50.0 pts (p = 0.019) | "
            "0.300 → 0.950 ± 0.071 [0.315, 1.585] ↑ | 1.300 → 2.100 ± 0.141 [0.829, 3.371] | "
            "0.200 → 0.200 ± 0.141 [-1.071, 1.471] | stop 0.90, length 0.10 | 2.00 | 0.0100 / 0.0200 | 30 |") in page
    assert "| grpo | single-turn | 2 | 2 | 0.020 → 0.150 ± 0.071 [-0.485, 0.785] | — | — | — | — | — | — | — | 30 |" in page
    assert "| grpo-tool | grpo | 7.07 | 2.0 | 0.0194 | 0.0194 | a > b |" in page  # the ranking's pair, Holm of one
    assert f"pretrained model `{TOOL}`" in page  # each label's own before → after section stays


def test_the_suite_end_to_end_on_cpu_and_its_merge_into_the_tool_use_leaderboard(suite_data, random_model_dir, tmp_path):
    """One GRPO seed with the tool and single-turn, 1 step each, and the pretrained model both ways, four jobs at once
    (HF rollout, CPU, 3 test problems); then --merge beside the committed tiny tool-use export. ~50 s on 2 idle cores,
    minutes when other work shares them. The chat format: the tiny tokenizer spells no `</python>` stop string."""
    data = tmp_path / "data"
    shutil.copytree(suite_data, data)
    out = tmp_path / "out"
    command = [sys.executable, "-m", "core.cli", "leaderboard", "run", "--suite", "tool-arithmetic",
               "--model", random_model_dir, "--data-dir", str(data), "--out", str(out), "--gpus", "cpu",
               "--runs-per-gpu", "4", "--recipes", "grpo", "--seeds", "0", "--eval-before", "--tool-format", "chat",
               "--steps", "1", "--prompts", "2", "--n", "2", "--mini-batch", "2", "--max-response", "24",
               "--max-prompt", "512", "--val-samples", "3", "--test-freq", "1", "--rollout", "hf", "--eval-limit", "3",
               "--eval-max-tokens", "24", "--train-reward", "math_verify", "--format-score", "0", "--",
               "trainer.device=cpu", "trainer.num_threads=1"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "[format probe]" not in result.stdout  # --tool-format given: no probe
    export = load_export(out / "runs.json")
    assert sorted(run["recipe"] for run in export["runs"]) == ["grpo", "grpo-tool"]
    by_model = {(entry["stage"], entry["model"]): entry for entry in export["evals"]}
    tool_label = f"{random_model_dir} + python tool"
    assert set(by_model) == {(stage, model) for stage in ("before", "after") for model in (random_model_dir, tool_label)}
    for stage in ("before", "after"):
        figures = by_model[(stage, tool_label)]["results"]["tool_arithmetic"]
        assert 0 <= figures["tool_call_rate"] <= 1 and figures["num_turns"] >= 1
        assert sum(value for key, value in figures.items() if key.startswith("stop_reason_")) == pytest.approx(1)
        assert "tool_call_rate" not in by_model[(stage, random_model_dir)]["results"]["tool_arithmetic"]
    (record,) = [json.loads(path.read_text()) for path in (out / "invocations").glob("*.json")]
    assert record["tool_format"] == "chat" and record["format_probe"] is None
    assert "| grpo-tool | Python tool | 1 |" in (out / "leaderboard.md").read_text()

    results = tmp_path / "results"
    (results / "tool_use").mkdir(parents=True)
    shutil.copy(REPO / "results" / "tool_use" / "runs.json", results / "tool_use" / "runs.json")
    assert merge_outputs([out], results, suite=SUITE) == 0
    assert load_export(results / "tool_use" / "tool_arithmetic" / "runs.json")["runs"] == export["runs"]
    board = (results / "tool_use" / "leaderboard.md").read_text()
    assert "| tool_use_grpo | embedded://tiny-calc |" in board  # the committed tiny rows stay
    assert f"## With the Python tool and single-turn, pretrained model `{random_model_dir}`" in board
    sources = json.loads((results / "tool_use" / "leaderboard.json").read_text())["source"].split()
    assert [Path(source).relative_to(results).as_posix() for source in sources] == [
        "tool_use/runs.json", "tool_use/tool_arithmetic/runs.json"]
    assert "the sections of `" in (results / "tool_use" / "tool_arithmetic" / "README.md").read_text()
