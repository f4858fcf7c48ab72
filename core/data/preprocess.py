"""`recipezoo data`: GSM8K / MATH-500 / AIME 2024 / AIME 2025 / AMC 2023 as verl-schema parquet.

Each output row is `{data_source, prompt: [{role: user, content}], ability: "math",
reward_model: {style: "rule", ground_truth}, extra_info: {split, index, <source fields>}}`.
Prompts and ground truths follow verl's example preprocessors (gsm8k.py, math_dataset.py), so
accuracies compare with published verl runs: the question plus a step-by-step instruction; GSM8K's
answer is the text after `#### ` with commas removed, the others' is their `answer` field.

Online, rows come from the Hugging Face Hub through `datasets.load_dataset`; offline, `--local FILE`
reads a .jsonl / .parquet / .json file that has the source's own fields.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

GSM8K_INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
BOXED_INSTRUCTION = "Let's think step by step and output the final answer within \\boxed{}."
LOCAL_SUFFIXES = (".jsonl", ".parquet", ".json")
REASONING_GYM = "reasoning-gym"  # procedural tasks, core/data/reasoning_gym.py
TOOL_ARITHMETIC = "tool-arithmetic"  # arithmetic the tool decides, core/data/tool_arithmetic.py


@dataclass(frozen=True)
class Benchmark:
    name: str
    data_source: str  # the reward manager picks its scorer by this: keep the exact strings
    hf_id: str
    hf_config: str | None
    hf_splits: dict[str, str]  # our split name -> the hub's split name
    prompt_fields: tuple[str, ...]  # the first one present is the question (hub copies differ)
    answer_field: str
    extra_fields: tuple[str, ...]  # source fields copied into extra_info when present
    instruction: str
    ground_truth: Callable[[object], str]


def gsm8k_ground_truth(answer) -> str:
    """The text after the last `#### `, commas removed: "#### 1,080" -> "1080" (as verl's gsm8k.py)."""
    _, sep, final = str(answer).rpartition("#### ")
    final = final.strip().replace(",", "")
    if not sep or not final:
        raise ValueError(
            f"its 'answer' has no final answer after '#### ' (GSM8K answers end with '#### <number>'); "
            f"it ends with {str(answer)[-60:]!r}"
        )
    return final


def plain_ground_truth(answer) -> str:
    """The answer as given (MATH answers are LaTeX strings: "\\frac{14}{3}")."""
    return str(answer)


def integer_ground_truth(answer) -> str:
    """AIME / AMC answers are integers, but hub copies store "025" or 27.0: written as "25", "27"."""
    text = str(answer).strip()
    match = re.fullmatch(r"(-?)0*(\d+)(?:\.0*)?", text)
    return f"{match.group(1)}{match.group(2)}" if match else text


BENCHMARKS = {
    b.name: b
    for b in (
        Benchmark("gsm8k", "openai/gsm8k", "openai/gsm8k", "main", {"train": "train", "test": "test"},
                  ("question",), "answer", ("question", "answer"), GSM8K_INSTRUCTION, gsm8k_ground_truth),
        Benchmark("math500", "HuggingFaceH4/MATH-500", "HuggingFaceH4/MATH-500", None, {"test": "test"},
                  ("problem",), "answer", ("problem", "solution", "answer", "subject", "level", "unique_id"),
                  BOXED_INSTRUCTION, plain_ground_truth),
        # The hub copy of AIME 2024 names its only split "train"; it is an evaluation set, so "test" here.
        Benchmark("aime24", "aime24", "HuggingFaceH4/aime_2024", None, {"test": "train"},
                  ("problem",), "answer", ("id", "problem", "answer", "solution", "url", "year"),
                  BOXED_INSTRUCTION, integer_ground_truth),
        Benchmark("aime25", "aime25", "math-ai/aime25", None, {"test": "test"},
                  ("problem", "question"), "answer", ("id", "problem", "question", "answer"),
                  BOXED_INSTRUCTION, integer_ground_truth),
        Benchmark("amc23", "amc23", "math-ai/amc23", None, {"test": "test"},
                  ("problem", "question"), "answer", ("id", "problem", "question", "answer", "url"),
                  BOXED_INSTRUCTION, integer_ground_truth),
    )
}


def expected_fields(benchmark: Benchmark) -> str:
    question = " or ".join(repr(f) for f in benchmark.prompt_fields)
    return f"{question} (the question) and {benchmark.answer_field!r}"


# ---- rows ---------------------------------------------------------------------------------------
def make_rows(benchmark: Benchmark, source_rows: list[dict], split: str, *, where: str,
              instruction: str | None = None) -> list[dict]:
    """Source rows -> verl-schema rows. `where` names the input in errors (a path or a hub id)."""
    if not source_rows:
        raise ValueError(f"{where}: no rows; expected {benchmark.name} rows with fields {expected_fields(benchmark)}")
    suffix = benchmark.instruction if instruction is None else instruction
    rows = []
    for index, source in enumerate(source_rows):
        context = f"{where}: row {index + 1} of {len(source_rows)}"
        question = next((source[f] for f in benchmark.prompt_fields if _present(source, f)), None)
        if question is None or not _present(source, benchmark.answer_field):
            missing = benchmark.prompt_fields[0] if question is None else benchmark.answer_field
            raise ValueError(
                f"{context} has no (or an empty) field {missing!r}; {benchmark.name} rows need "
                f"{expected_fields(benchmark)}, this row has {sorted(source)}"
            )
        try:
            ground_truth = benchmark.ground_truth(source[benchmark.answer_field])
        except ValueError as error:
            raise ValueError(f"{context}: {error}") from None
        extra = {f: source[f] for f in benchmark.extra_fields if f in source}
        rows.append({
            "data_source": benchmark.data_source,
            "prompt": [{"role": "user", "content": f"{question} {suffix}" if suffix else str(question)}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": ground_truth},
            "extra_info": {"split": split, "index": index, **extra},
        })
    return rows


def _present(row: dict, field: str) -> bool:
    value = row.get(field)
    return value is not None and str(value).strip() != ""


# ---- sources ------------------------------------------------------------------------------------
def read_local(path: str | Path) -> list[dict]:
    """Rows of a .jsonl, .parquet, or .json file (a JSON array of objects, or one object per line)."""
    path = Path(path)
    if path.suffix not in LOCAL_SUFFIXES:
        raise ValueError(f"{path}: unsupported file type {path.suffix!r}; --local takes one of {list(LOCAL_SUFFIXES)}")
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file; check the --local path")
    if path.suffix != ".json":
        from core.data.rows import read_rows  # pyarrow comes with it: not at import, which the CLI's parser does

        return read_rows(path)
    text = path.read_text(encoding="utf-8")
    try:
        rows = json.loads(text)
    except json.JSONDecodeError:  # a .json file holding JSON lines is common (hub exports)
        rows = []
        for line_number, line in enumerate(text.splitlines(), start=1):
            try:
                rows += [json.loads(line)] if line.strip() else []
            except json.JSONDecodeError as error:
                raise ValueError(f"{path}:{line_number}: not valid JSON ({error.msg}); expected a JSON array "
                                 f"of objects or one JSON object per line") from None
    if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
        raise ValueError(f"{path}: expected a JSON array of objects (one per row) or one JSON object per line")
    return rows


def load_hub(benchmark: Benchmark, split: str) -> list[dict]:
    """The hub split behind our `split`; any failure (offline, renamed dataset) says to use --local."""
    hub_split = benchmark.hf_splits[split]
    name = benchmark.hf_id + (f" ({benchmark.hf_config})" if benchmark.hf_config else "")
    hint = (f"pass --local FILE instead: a .jsonl/.parquet/.json file of {benchmark.name} {split} rows "
            f"with fields {expected_fields(benchmark)}")
    try:
        import datasets
    except ImportError:
        raise ValueError(f"reading {name} from the Hugging Face Hub needs `pip install datasets`; or {hint}") from None
    try:
        return datasets.load_dataset(benchmark.hf_id, benchmark.hf_config, split=hub_split).to_list()
    except Exception as error:  # noqa: BLE001 - offline / auth / renamed all end in the same advice
        raise ValueError(
            f"could not load {name} split {hub_split!r} from the Hugging Face Hub "
            f"({type(error).__name__}: {error}); if you are offline, {hint}"
        ) from None


def infer_split(benchmark: Benchmark, path: str | Path) -> str:
    """`train.jsonl` -> train when the benchmark has that split; anything else -> test."""
    stem = Path(path).stem
    return stem if stem in benchmark.hf_splits else "test"


def preprocess(name: str, out_dir: str | Path, *, local: str | Path | None = None, split: str | None = None,
               instruction: str | None = None) -> list[tuple[Path, int]]:
    """Write `out_dir/<split>.parquet` for each split; returns (path, row count) per file written.

    Without `split`: every split the hub has (gsm8k: train and test), or with `local` the split
    named by the file (train.jsonl -> train), else test.
    """
    if name not in BENCHMARKS:
        raise ValueError(f"unknown benchmark {name!r}; choose one of {sorted(BENCHMARKS)}")
    benchmark = BENCHMARKS[name]
    if split is not None and split not in benchmark.hf_splits:
        raise ValueError(f"{name} has no split {split!r}; it has {sorted(benchmark.hf_splits)}")
    if split is None:
        splits = [infer_split(benchmark, local)] if local is not None else list(benchmark.hf_splits)
    else:
        splits = [split]
    converted = {}  # every split is read and checked before any file is written
    for this_split in splits:
        if local is not None:
            source_rows, where = read_local(local), str(local)
        else:
            source_rows, where = load_hub(benchmark, this_split), f"{benchmark.hf_id} {this_split}"
        converted[this_split] = make_rows(benchmark, source_rows, this_split, where=where, instruction=instruction)
    from core.data.rows import write_rows

    return [(write_rows(rows, Path(out_dir) / f"{s}.parquet"), len(rows)) for s, rows in converted.items()]


# ---- command line -------------------------------------------------------------------------------
def run(args: argparse.Namespace) -> int:
    """One command for three kinds of data: a benchmark (exit 1 on failure, as before), reasoning-gym tasks
    (core/data/reasoning_gym.py) or the tool arithmetic task (core/data/tool_arithmetic.py); for the generated
    ones exit 2: everything they refuse is bad input."""
    generated = args.benchmark in (REASONING_GYM, TOOL_ARITHMETIC)
    benchmarks = tuple(BENCHMARKS)
    owners = {"--tasks": (REASONING_GYM,), "--difficulty": (REASONING_GYM, TOOL_ARITHMETIC),
              "--max-constant-share": (REASONING_GYM,), "--local": benchmarks}
    given = {"--tasks": args.tasks, "--difficulty": args.difficulty, "--local": args.local,
             "--max-constant-share": args.max_constant_share is not None}
    misplaced = [flag for flag, value in given.items() if value and args.benchmark not in owners[flag]]
    if misplaced:
        where = "; ".join(f"{flag} belong to " + ("`recipezoo data <benchmark>`" if owners[flag] == benchmarks else
                                                   " or ".join(f"`recipezoo data {o}`" for o in owners[flag]))
                          for flag in misplaced)
        print(f"recipezoo data: {where}, not {args.benchmark}", file=sys.stderr)
        return 2
    notes = []  # reasoning-gym: each task's constant-answer and answer-in-the-question shares
    try:
        if args.benchmark == REASONING_GYM:
            from core.data import reasoning_gym

            written, test_by_task = reasoning_gym.write_suite_from_args(args)
            notes = reasoning_gym.answer_share_lines(test_by_task)
        elif args.benchmark == TOOL_ARITHMETIC:
            from core.data import tool_arithmetic

            written = tool_arithmetic.write_from_args(args)
        else:
            written = preprocess(args.benchmark, args.out, local=args.local, split=args.split,
                                 instruction=args.instruction)
    except (ValueError, OSError) as error:  # reasoning_gym.TaskError is a ValueError
        print(f"recipezoo data{f' {args.benchmark}' if generated else ''}: {error}", file=sys.stderr)
        return 2 if generated else 1
    for line in [f"{path}: {count} rows" for path, count in written] + notes:
        print(line, flush=True)
    return 0


def add_parser(commands) -> argparse.ArgumentParser:
    """Add `data` to an argparse subparsers object (core/cli.py's build_parser)."""
    parser = commands.add_parser(
        "data", help="write GSM8K / MATH-500 / AIME / AMC / reasoning-gym / tool-arithmetic tasks as verl-schema parquet",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("benchmark", choices=[*sorted(BENCHMARKS), REASONING_GYM, TOOL_ARITHMETIC])
    parser.add_argument("--out", required=True, metavar="DIR", help="output folder: DIR/<split>.parquet")
    parser.add_argument("--local", metavar="FILE",
                        help="read this .jsonl/.parquet/.json (the source's own fields) instead of the Hub")
    parser.add_argument("--split", help="one split (gsm8k: train or test; the others: test); "
                                        "default: all from the Hub, or the --local file's name, else test")
    parser.add_argument("--instruction", metavar="TEXT",
                        help="replace the text appended to each question (default: verl's step-by-step "
                             "instruction for the benchmark; '' appends nothing)")
    suite = parser.add_argument_group("reasoning-gym (core/data/reasoning_gym.py) and tool-arithmetic "
                                      "(core/data/tool_arithmetic.py)")
    suite.add_argument("--tasks", nargs="+", metavar="TASK", help="reasoning-gym task names")
    suite.add_argument("--difficulty", nargs="+", metavar="TASK.KEY=VALUE",
                       help="a field of a reasoning-gym task's config; tool-arithmetic: min_digits=N max_digits=N "
                            "(default 4, 6)")
    suite.add_argument("--size", type=int, default=2000, help="training rows (reasoning-gym: per task)")
    suite.add_argument("--test-size", type=int, default=200, help="test rows, none also in train "
                                                                  "(reasoning-gym: per task)")
    suite.add_argument("--seed", type=int, default=0, help="the generators' seed (test rows use another stream)")
    suite.add_argument("--max-constant-share", type=float, default=None, metavar="X",
                       help="refuse a task whose most common test answer is more than this share of its test rows "
                            "(what always giving that answer would score); default: no limit")
    parser.set_defaults(handler=run)
    return parser
