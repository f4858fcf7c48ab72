"""Screen reasoning-gym's tasks for a suite: each task at its curriculum's easiest level, a model's greedy accuracy
on it before any RL, beside what a shortcut scores (the most common answer's share; the share of problems whose
answer is already in the question; for countdown and knights_knaves, the share one fixed row of operators or
pattern of roles solves). A suite wants tasks the model starts on between 5% and 50% (issue 34), with
open answers; this finds them among all the tasks instead of a handful tried by hand.

    python -m bench.leaderboard.task_screen OUT_DIR [--model pypi://SmolLM2-135M-Instruct] [--per-task 40] [--tasks T ...]
        [--rollout hf] [--device cpu] [--batch-size 16] [--from-eval EARLIER/eval.json]

writes OUT_DIR/test.parquet (per task the first --per-task distinct test problems, seed 0, the suites' instruction),
OUT_DIR/settings.json (each task's settings, or why it was skipped), OUT_DIR/eval.json (`recipezoo eval`) and
OUT_DIR/screen.md (the table, by category). A task's easiest level is reasoning-gym's own curriculum at level 0
(`create_curriculum(task).generate_configuration()`); `--difficulty` keys of `recipezoo data reasoning-gym`
reproduce any row.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import signal
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

from core.data.reasoning_gym import (
    INSTRUCTION,
    answer_in_question_share,
    constant_answer,
    fixed_shortcut,
    registered_tasks,
    test_entries,
    to_row,
)
from core.data.rows import read_rows, write_rows
from core.eval.evaluate import prompt_fingerprints
from core.models.loading import load_tokenizer, resolve_model_path

BAND = (0.05, 0.50)        # the start accuracy a suite's task should have (issue 34)
MAX_SHORTCUT = 0.10        # the open suite's limit on the constant-answer share (--max-constant-share)
GENERATION_LIMIT_S = 60    # some generators search for puzzles (sokoban) and can take minutes a problem
MAX_PROMPT_TOKENS = 512    # the suites' data.max_prompt_length (bench/leaderboard/suites.py)


def easiest_settings(task: str) -> dict:
    """The task's config at its curriculum's level 0, as `create_dataset` keyword arguments (no seed, no size)."""
    from reasoning_gym.factory import create_curriculum

    config = create_curriculum(task).generate_configuration({"seed": 0, "size": 1})
    return {key: tuple(value) if isinstance(value, list) else value
            for key, value in dataclasses.asdict(config).items() if key not in ("seed", "size")}


def category(task: str) -> str:
    """reasoning-gym's own grouping: the package its generator lives in (arithmetic, algebra, logic, games, ...)."""
    return registered_tasks()[task][0].__module__.split(".")[1]


class GenerationTimeout(Exception):
    """A task's generator ran past GENERATION_LIMIT_S."""


def _stop_generation(signum, frame):
    raise GenerationTimeout(f"generating the test problems took over {GENERATION_LIMIT_S} s")


def write_screen_data(tasks: list[str], per_task: int, out: Path, prompt_tokens=None) -> dict[str, dict]:
    """Every task's test rows into out/test.parquet; {task: {"settings": ...} or {"skipped": reason}}.
    `prompt_tokens(row)`, when given: a task with a prompt over MAX_PROMPT_TOKENS is skipped (no suite could train
    on it)."""
    from reasoning_gym.factory import has_curriculum

    previous_handler = signal.signal(signal.SIGALRM, _stop_generation)
    rows, record = [], {}
    for task in tasks:
        if not has_curriculum(task):
            record[task] = {"skipped": "no curriculum in reasoning-gym, so no easiest level to screen at"}
            continue
        signal.alarm(GENERATION_LIMIT_S)
        try:
            settings = easiest_settings(task)
            test = [to_row(task, entry, settings, "test", index, INSTRUCTION)
                    for index, entry in enumerate(test_entries(task, settings, per_task, 0))]
        except Exception as error:  # a generator that fails at level 0 is a finding, not a stop
            record[task] = {"skipped": f"{type(error).__name__}: {str(error)[:200]}"}
            continue
        finally:
            signal.alarm(0)
        longest = max(map(prompt_tokens, test)) if prompt_tokens else 0
        if longest > MAX_PROMPT_TOKENS:
            record[task] = {"skipped": f"a prompt of {longest} tokens, over the suites' {MAX_PROMPT_TOKENS}"}
            continue
        rows += test
        record[task] = {"settings": settings, "category": category(task)}
        print(f"{task}: {len(test)} test problems", flush=True)
    signal.signal(signal.SIGALRM, previous_handler)
    write_rows(rows, out / "test.parquet")
    (out / "settings.json").write_text(json.dumps(record, indent=2, default=str) + "\n")
    return record


def screen_table(results: dict, test_rows: list[dict], record: dict[str, dict], command: str) -> str:
    """Markdown: per category, each screened task's start accuracy and shortcut shares; then the skipped tasks."""
    rows_by_task = defaultdict(list)
    for row in test_rows:
        rows_by_task[row["extra_info"]["task"]].append(row)
    generation = results["protocol"]["generation"]
    lines = [f"`{command}`", "",
             f"`{generation['model']}`, greedy, at most {generation['max_tokens']} new tokens, {generation['rollout']} "
             "rollout, each task at its reasoning-gym curriculum's easiest level. *in band*: a start between "
             f"{BAND[0]:.0%} and {BAND[1]:.0%}, with no shortcut (constant answer, answer in the question, one "
             f"fixed row of operators for countdown or pattern of roles for knights_knaves) scoring more than "
             f"{MAX_SHORTCUT:.0%}.", "",
             "| category | task | prompts | start accuracy | constant-answer share | answer in question | "
             "fixed pattern | in band | settings |", "|---|---|---:|---:|---:|---:|---:|---|---|"]
    screened = sorted(rows_by_task, key=lambda task: (record[task]["category"], task))
    for task in screened:
        rows = rows_by_task[task]
        accuracy = results["results"][rows[0]["data_source"]]["mean@1"]
        _, constant = constant_answer(rows)
        in_question = answer_in_question_share(rows)
        shortcut = fixed_shortcut(rows)  # None but for countdown and knights_knaves
        fixed = shortcut[1][0][1] if shortcut else 0.0
        in_band = BAND[0] <= accuracy <= BAND[1] and max(constant, in_question, fixed) <= MAX_SHORTCUT
        settings = ", ".join(f"{key}={value}" for key, value in record[task]["settings"].items())
        lines.append(f"| {record[task]['category']} | {task} | {len(rows)} | {accuracy:.2f} | {constant:.2f} | "
                     f"{in_question:.2f} | {f'{fixed:.2f}' if shortcut else '—'} | {'yes' if in_band else ''} | "
                     f"{settings[:160]} |")
    skipped = {task: entry["skipped"] for task, entry in record.items() if "skipped" in entry}
    if skipped:
        lines += ["", "Not screened:", ""] + [f"- {task}: {reason}" for task, reason in sorted(skipped.items())]
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--model", default="pypi://SmolLM2-135M-Instruct")
    parser.add_argument("--per-task", type=int, default=40)
    parser.add_argument("--tasks", nargs="+", help="default: every registered task")
    parser.add_argument("--rollout", default="hf")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--from-eval", type=Path, help="an earlier screen's eval.json: rebuild screen.md from it "
                        "instead of generating (the same --model, --tasks and --per-task redraw the same problems while "
                        "the generators and this screen's draw are unchanged: the model is checked, and the problems "
                        "by the prompts' sha256 an evaluation records, by their count in older ones)")
    return parser.parse_args(argv)


def check_earlier_model(path: Path, results: dict, model: str) -> None:
    """--from-eval must be of this model (checked before the problems are drawn again)."""
    generation = results.get("protocol", {}).get("generation") if isinstance(results, dict) else None
    had = generation.get("model") if isinstance(generation, dict) else None
    if had != model:
        raise SystemExit(f"--from-eval {path}: model {had!r}, not --model {model!r}"
                         + ("" if had else " (no protocol.generation.model: not a `recipezoo eval` report)"))


def check_earlier_problems(path: Path, results: dict, test_rows: list[dict]) -> None:
    """--from-eval must be of these problems: their fingerprints where it has them (prompt_fingerprints), else
    their count per task. One line naming what differs."""
    if "prompts_sha256" in results:
        ours = prompt_fingerprints(test_rows)
        for source in sorted(set(ours) | set(results["prompts_sha256"])):
            if results["prompts_sha256"].get(source) != ours.get(source):
                raise SystemExit(f"--from-eval {path}: {source}'s prompts differ from those drawn here (prompt "
                                 "sha256); expected the screen's own --tasks and --per-task, and unchanged generators")
        return
    for source, count in Counter(row["data_source"] for row in test_rows).items():
        had = results["results"].get(source, {}).get("num_prompts")
        if had != count:
            raise SystemExit(f"--from-eval {path}: {source} has {had} prompts there and {count} here; expected the "
                             "screen's own --tasks and --per-task")


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    tasks = args.tasks or sorted(registered_tasks())
    unknown = sorted(set(tasks) - set(registered_tasks()))
    if unknown:
        raise SystemExit(f"--tasks: unknown reasoning-gym tasks {unknown}")
    earlier = json.loads(args.from_eval.read_text()) if args.from_eval else None
    if args.from_eval:
        check_earlier_model(args.from_eval, earlier, args.model)
    args.out.mkdir(parents=True, exist_ok=True)
    tokenizer = load_tokenizer(resolve_model_path(args.model))
    record = write_screen_data(tasks, args.per_task, args.out, lambda row: len(tokenizer(tokenizer.apply_chat_template(
        row["prompt"], tokenize=False, add_generation_prompt=True), add_special_tokens=False)["input_ids"]))
    if args.from_eval:
        check_earlier_problems(args.from_eval, earlier, read_rows(args.out / "test.parquet"))
        if args.from_eval.resolve() != (args.out / "eval.json").resolve():  # a screen rebuilt in its own folder
            shutil.copyfile(args.from_eval, args.out / "eval.json")
    else:
        subprocess.run([sys.executable, "-m", "core.cli", "eval", "--model", args.model, "--data",
                        str(args.out / "test.parquet"), "--temperature", "0", "--max-tokens", "256",
                        "--max-prompt-length", str(MAX_PROMPT_TOKENS), "--rollout", args.rollout, "--device",
                        args.device, "--batch-size", str(args.batch_size), "--no-mlflow", "--out",
                        str(args.out / "eval.json")], check=True)
    command = "python -m bench.leaderboard.task_screen " + " ".join(argv)
    table = screen_table(json.loads((args.out / "eval.json").read_text()), read_rows(args.out / "test.parquet"),
                         record, command)
    (args.out / "screen.md").write_text(table, encoding="utf-8")
    print(f"wrote {args.out / 'screen.md'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
