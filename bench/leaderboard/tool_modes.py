"""A tool suite's two rollouts (bench/leaderboard/suites.py, `tool_folders`): every recipe × seed trained with the
sandboxed Python tool and single-turn, under one budget, and the pretrained model evaluated both ways.

- Rows: `<recipe>` trains single-turn (the baseline, as a sync row keeps the plain name beside its schedules),
  `<recipe>-tool` with the tool (rollout.multi_turn, core.rollout.multi_turn.python_tool:python).
- The problems are the same in both (one seed, one order); only the instruction differs, each saying what its
  rollout offers (suites.py, TOOL_ARITHMETIC_FOLDERS).
- The tool runs' call format (`--tool-format`): chat (`<tool_call>` JSON, the schema in the chat template) or tags
  (`<python>code</python>`); `auto` runs bench/tool_use/format_probe.py first and takes the format the model already
  writes more often, recorded in --out/format_probe.json, which a rerun reuses, so its runs match the earlier ones.
- Evaluations of the tool's rollout are tagged eval_model `<model> + python tool`: the pretrained model with its
  tool is another starting point than the model alone, with a before → after section of its own, and the tool
  section (core/leaderboard/tool_suite.py) holds both rollouts side by side.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from bench.leaderboard.suites import SUITES
from core.leaderboard.tool_suite import TOOL_ROW_SUFFIX, tool_model_label

PYTHON_TOOL = "core.rollout.multi_turn.python_tool:python"
TOOL_FORMATS = ("auto", "chat", "tags")
PROBE_FILE = "format_probe.json"
# Up to 4 assistant turns (a call, its reply, the answer: one call leaves two spare); a reply cut at 1000 characters.
MULTI_TURN = ("rollout.multi_turn.enable=true", f"rollout.multi_turn.tools=[{PYTHON_TOOL}]",
              "rollout.multi_turn.max_turns=4", "rollout.multi_turn.max_tool_response_chars=1000")


def add_tool_args(parser) -> None:
    tools = parser.add_argument_group("a tool suite (--suite tool-arithmetic: every recipe with the Python tool and "
                                      "single-turn; bench/leaderboard/tool_modes.py)")
    tools.add_argument("--tool-format", choices=TOOL_FORMATS, default=None, help="the tool runs' call format: chat "
                       "(<tool_call> JSON), tags (<python>code</python>) or auto (default: the one the format probe "
                       "finds the model writing more often, recorded in --out/format_probe.json)")
    tools.add_argument("--probe-prompts", type=int, default=16, help="test problems the format probe samples, per format")


def check_tool_format(args, suite, parser) -> None:
    """--tool-format only for a suite with a tool (before anything starts)."""
    if args.tool_format is not None and not suite.tool_folders:
        parser.error(f"--tool-format {args.tool_format}: suite {suite.name!r} has no tool; "
                     f"expected --suite one of {sorted(name for name, s in SUITES.items() if s.tool_folders)}")


def mode_pairs(jobs: list, model: str) -> list:
    """Each training job twice, single-turn (as given) then with the tool (`<row>-tool`); the pretrained model's
    evaluation twice, without and with the tool."""
    import dataclasses

    paired = []
    for job in jobs:
        tool_row = None if job.variant is None else f"{job.row}{TOOL_ROW_SUFFIX}"
        tool_name = f"pretrained{TOOL_ROW_SUFFIX}" if job.variant is None else f"{tool_row}-seed{job.seed}"
        paired += [job, dataclasses.replace(job, name=tool_name, row=tool_row, tool=True,
                                            eval_model=tool_model_label(model))]
    return paired


def tool_overrides(job, suite, data_dir: str, tool_format: str | None) -> list[str]:
    """A tool job's config: the multi-turn rollout in `tool_format` and the prompts that offer the tool."""
    if not job.tool:
        return []
    folder = Path(data_dir) / suite.tool_folders[tool_format][0]
    return [*MULTI_TURN, f"rollout.multi_turn.format={tool_format}", f"data.train_files={folder / 'train.parquet'}",
            f"data.val_files={folder / 'test.parquet'}"]


def tool_job_args(job, suite, tool_format: str | None) -> list[str]:
    """job.py's flags for a tool job: its eval sets on the tool's prompts, its evaluations under the tool's label."""
    if not job.tool:
        return []
    folder = suite.tool_folders[tool_format][0]
    files = [arg for name, file, *_ in suite.eval_sets
             for arg in ("--eval-file", f"{name}={folder}/{Path(file).name}")]
    return [*files, "--eval-model", job.eval_model]


def chosen_format(args, suite, out: Path, model_path: str, gpu: str) -> str | None:
    """The tool runs' call format: --tool-format, else the one recorded in `out` by an earlier invocation (its
    runs used it), else the format probe's choice (run now, on `gpu`). None for a suite without a tool."""
    if not suite.tool_folders:
        return None
    recorded = out / PROBE_FILE
    earlier = json.loads(recorded.read_text())["chosen"] if recorded.is_file() else None
    wanted = args.tool_format or "auto"
    if earlier and wanted not in ("auto", earlier):
        raise SystemExit(f"--tool-format {wanted}: the tool runs already in {out} used {earlier} ({recorded}); "
                         f"rows of two formats would share a table: pass --tool-format {earlier}, or another --out")
    if wanted != "auto":
        return wanted
    if earlier:
        print(f"[format probe] using {earlier}, as recorded in {recorded}", flush=True)
        return earlier
    data = Path(args.data_dir)
    command = [sys.executable, "-m", "bench.tool_use.format_probe", "--model", model_path,
               "--data", str(data / suite.tool_folders["chat"][0] / "test.parquet"),
               "--tags-data", str(data / suite.tool_folders["tags"][0] / "test.parquet"),
               "--prompts", str(args.probe_prompts), "--json", str(recorded)]
    env = {**os.environ, **({"CUDA_VISIBLE_DEVICES": gpu} if gpu else {})}
    print(f"[format probe] {' '.join(command)}", flush=True)
    if subprocess.call(command, cwd=Path(__file__).resolve().parents[2], env=env) != 0 or not recorded.is_file():
        raise SystemExit("the format probe failed (its output is above); pass --tool-format chat or tags to skip it")
    return json.loads(recorded.read_text())["chosen"]


def tool_record(out: Path, tool_format: str | None) -> dict:
    """A tool suite's call format for the invocation's record, with the format probe's counts where it ran."""
    if tool_format is None:
        return {}
    probe = out / PROBE_FILE
    return {"tool_format": tool_format, "format_probe": json.loads(probe.read_text()) if probe.is_file() else None}
