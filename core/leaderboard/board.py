"""The leaderboard (DESIGN §8): one row per recipe × model, one column per task, mean ± std over seeds.

Built from a run export (export.py), never typed by hand. Each task column `val/<data_source>/acc`
has one fixed evaluation protocol (dataset, split, samples, temperature, top-p, grader), read from
the runs' params and printed above the table. Runs of one column evaluated differently are never
averaged together: building raises and names them (delete the odd runs, or re-evaluate them).

Outputs (all deterministic: the same export gives byte-identical files):
  leaderboard.md / .csv / .json, and curves_<data_source>.png (held-out acc and training reward
  vs step, mean over seeds with a ±std band, one line per recipe).

Exports with `evals` add a section per pretrained model (before_after.py: before -> after RL, mean,
std and a 95% interval over seeds), with its curves in plots/ (one figure per model; a run that did not
validate at step 0 starts at the pretrained model's evaluation, eval_columns.with_pretrained_start); the training runs
it shows appear only there, not in the tiny-task table. Rows whose runs call tools get a before -> after
section of their own too (tool_use.py), and a pretrained model trained with a tool and single-turn one
comparing both (tool_suite.py). Written into the repository's own tables (TINY_TABLE, RECIPE_BASELINES), the
leaderboard also rewrites each recipe README's generated blocks (`<!-- BEGIN gsm8k-leaderboard ...`,
`<!-- BEGIN tiny-leaderboard ...`); written anywhere under results/, those of its tool-use rows
(`<!-- BEGIN tool-use-leaderboard ...`).
"""

from __future__ import annotations

import csv
import io
import json
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.leaderboard.before_after import (
    BeforeAfter,
    before_after_records,
    build_before_after,
    format_tokens,
    render_before_after,
)
from core.leaderboard.eval_columns import GSM8K_STRICT, param_number, with_pretrained_start
from core.leaderboard.export import (
    AFTER_EVAL_TAG,
    TOOL_CALL_RATE_KEY,
    TRAIN_REWARD_KEY,
    LeaderboardError,
    check_unique_seeds,
    is_task_acc_key,
    per_model_paths,
)
from core.leaderboard.recipe_readmes import update_gsm8k_readmes, update_tiny_readmes, update_tool_use_readmes
from core.leaderboard.schedules import write_schedule_plots
from core.leaderboard.seed_stats import SeedStats, plot_seed_curves
from core.leaderboard.sft_pipeline import render_sft_pipeline
from core.leaderboard.suite_rank import SUITE_CURVE_KEY, with_suite_history
from core.leaderboard.tables import markdown_table, md_cell, round6, steps_text
from core.leaderboard.tool_suite import ToolSuite, build_tool_suites, render_tool_suite, tool_suite_records
from core.leaderboard.tool_use import ToolUseSection, build_tool_use, render_tool_use, tool_use_records
from core.reward.reasoning_gym import is_reasoning_gym
from core.tracking.console import format_duration

# data_source -> how its accuracy is graded (core/reward/manager.py's scorers; GSM8K is verl-compatible).
GRADERS = {"arithmetic": GSM8K_STRICT, "calculator": GSM8K_STRICT, "gsm8k": GSM8K_STRICT,
           "openai/gsm8k": GSM8K_STRICT}
PROTOCOL_KEYS = ("dataset", "split", "samples", "temperature", "top_p", "grader")
# Where each protocol entry comes from, so an error names the config key to fix.
PROTOCOL_SOURCES = {
    "dataset": "data.val_files", "split": "data.val_files",
    "samples": "data.val_max_samples, rollout.val_n", "temperature": "rollout.val_temperature",
    "top_p": "rollout.top_p", "grader": "the data_source's scorer",
}
REPO_RESULTS = Path(__file__).resolve().parents[2] / "results"
# The table each recipe README's GSM8K block shows (recipe_readmes.py): GSM8K from Qwen2.5-Coder-0.5B-Instruct.
RECIPE_BASELINES = REPO_RESULTS / "leaderboard" / "gsm8k_coder"
# The tiny tasks' table (the CPU demo's record; the recipe READMEs' tiny-task blocks), its export under its own name
# beside the runs.json of the GSM8K section from SmolLM2-135M-Instruct that shares the table.
TINY_TABLE = REPO_RESULTS / "leaderboard" / "gsm8k_smollm2"
TINY_EXPORT = "tiny_runs.json"
_SPLIT_NAMES = (("validation", "validation"), ("valid", "validation"), ("val", "validation"),
                ("test", "test"), ("dev", "dev"), ("train", "train"))


@dataclass(frozen=True)
class Cell(SeedStats):
    """One task accuracy of one row: the final validation value of each seed, and their summary."""

    def text(self) -> str:
        spread = f"{self.std:.3f}" if self.std is not None else "n/a"
        return f"{self.mean:.3f} ± {spread} ({self.n})"


@dataclass
class Row:
    recipe: str
    model: str
    runs: list[dict]
    cells: dict[str, Cell] = field(default_factory=dict)  # task -> cell

    @property
    def seeds(self) -> int:
        return len(self.runs)

    @property
    def steps(self) -> set[int]:
        return {run["steps"] for run in self.runs if run["steps"] is not None}

    @property
    def wall_seconds(self) -> float | None:
        values = [run["wall_seconds"] for run in self.runs if run["wall_seconds"] is not None]
        return statistics.fmean(values) if values else None

    @property
    def generated_tokens(self) -> float:
        return statistics.fmean(run["generated_tokens"] for run in self.runs)

    def start_acc(self, task: str) -> float | None:
        """Mean held-out accuracy at step 0 (before RL): rows that start apart are not level."""
        starts = [points[0][1] for run in self.runs
                  if (points := run["history"].get(f"val/{task}/acc")) and points[0][0] == 0]
        return statistics.fmean(starts) if starts else None


@dataclass
class Leaderboard:
    tasks: list[str]                       # data sources, sorted; column i is val/<tasks[i]>/acc
    protocols: dict[str, dict[str, str]]   # task -> PROTOCOL_KEYS -> text
    rows: list[Row]                        # sorted by the first task's mean, best first
    experiment: str | None = None
    before_after: BeforeAfter | None = None  # from the export's `evals`, when it has any
    tool_use: ToolUseSection | None = None    # the rows whose runs called tools, when any did
    tool_suites: list[ToolSuite] = field(default_factory=list)  # a model trained with a tool and without (tool_suite.py)


def task_protocol(run: dict, task: str) -> dict[str, str]:
    """How `run` evaluated `task`, in words a reader can check; equal dicts = comparable numbers."""
    params = run["params"]
    files = params.get("data.val_files") or "not logged"
    max_samples, val_n = params.get("data.val_max_samples"), params.get("rollout.val_n") or "?"
    prompts = f"first {max_samples} prompts" if param_number(max_samples) else "all prompts"
    temperature = param_number(params.get("rollout.val_temperature"))
    top_p = param_number(params.get("rollout.top_p"))
    return {
        "dataset": f"{task} ({files})",
        "split": _split(files),
        "samples": f"{prompts} × {val_n} response{'s' if val_n != '1' else ''} each",
        "temperature": "not logged" if temperature is None else
                       "0 (greedy)" if temperature == 0 else f"{temperature:g}",
        "top_p": "not logged" if top_p is None else f"{top_p:g}",
        "grader": GRADERS.get(task, f"unregistered for data_source {task!r}"),
    }


def _split(files: str) -> str:
    """The held-out split, from the file names: the embedded task validates on its `test` split."""
    try:
        specs = json.loads(files) if files.startswith("[") else [files]
    except json.JSONDecodeError:
        specs = [files]
    splits = []
    for spec in specs:
        if str(spec).startswith("embedded://"):
            splits.append("test")  # core/data/sources.py: the val set is the task's test split
            continue
        stem = re.split(r"[/\\]", str(spec))[-1].lower()
        words = re.split(r"[^a-z]+", stem)
        splits.append(next((name for word, name in _SPLIT_NAMES if word in words), "unknown"))
    return ", ".join(dict.fromkeys(splits))


def build_leaderboard(export: dict) -> Leaderboard:
    """Group the export's runs by (recipe, model) and summarise each task column over seeds.

    Raises LeaderboardError when the export has no runs, when one (recipe, model) has two runs of
    one seed (n would count that seed twice), or when a column's runs used different protocols.
    """
    runs, evals = export.get("runs") or [], export.get("evals") or []
    if not runs and not evals:
        raise LeaderboardError(
            f"no FINISHED runs with a `recipe` tag in experiment {export.get('experiment')!r}; "
            "recipes set it with tracking.tags.recipe, and only finished runs count"
        )
    before_after = build_before_after(runs, evals) if evals else None
    # Runs evaluated before -> after (or meant to be: after_eval=pending) belong to that section, not here.
    evaluated = {entry.get("train_run_id") for entry in evals if entry["stage"] == "after"}
    runs = [run for run in runs if run["run_id"] not in evaluated and AFTER_EVAL_TAG not in run.get("tags", {})]
    tasks = sorted({key[len("val/"):-len("/acc")] for run in runs for key in run["final"] if is_task_acc_key(key)})
    protocols = {task: _one_protocol(task, [run for run in runs if f"val/{task}/acc" in run["final"]])
                 for task in tasks}
    groups: dict[tuple[str, str], list[dict]] = {}
    for run in runs:
        groups.setdefault((run["recipe"], str(run["model"])), []).append(run)
    rows = []
    for (recipe, model), members in groups.items():
        check_unique_seeds(recipe, model, members)
        row = Row(recipe, model, members)
        for task in tasks:
            values = [run["final"][f"val/{task}/acc"] for run in members if f"val/{task}/acc" in run["final"]]
            if values:
                row.cells[task] = Cell(tuple(values))
        rows.append(row)
    first = tasks[0] if tasks else None
    # Best first; rows without the first task's metric last; ties by name, so the order is stable.
    rows.sort(key=lambda r: (first not in r.cells, -r.cells[first].mean if first in r.cells else 0.0,
                             r.recipe, r.model))
    return Leaderboard(tasks, protocols, rows, export.get("experiment"), before_after, build_tool_use(rows, tasks),
                       build_tool_suites(before_after, evals) if before_after else [])


def _one_protocol(task: str, runs: list[dict]) -> dict[str, str]:
    variants: dict[tuple, list[dict]] = {}
    for run in runs:
        variants.setdefault(tuple(task_protocol(run, task).items()), []).append(run)
    if len(variants) == 1:
        return dict(next(iter(variants)))
    differing = [key for key in PROTOCOL_KEYS if len({dict(v)[key] for v in variants}) > 1]
    lines = [
        f"column val/{task}/acc: its runs were evaluated under {len(variants)} different protocols, which "
        f"must not be averaged together; they differ in {', '.join(differing)} "
        f"(params {'; '.join(PROTOCOL_SOURCES[key] for key in differing)}):"
    ]
    for protocol, members in sorted(variants.items(), key=lambda item: -len(item[1])):
        shown = ", ".join(f"{key}={dict(protocol)[key]!r}" for key in differing)
        names = ", ".join(f"{run['recipe']} seed {run['seed']} (run {run['run_id']})" for run in members)
        lines.append(f"  {shown}: {len(members)} run(s): {names}")
    lines.append("Evaluate every run of the column under one protocol, or remove the odd runs from the "
                 "store (`mlflow runs delete --run-id ID`) and rerun `recipezoo leaderboard report`.")
    raise LeaderboardError("\n".join(lines))


# ---- rendering ---------------------------------------------------------------------------------

PRETRAINED_PLOT = "plots/curves.png"  # the pretrained-model section's curves, under the out dir


def pretrained_plots(section: BeforeAfter) -> dict[str, str]:
    """Each pretrained model's curves, under the out dir: one figure per model, as the rows of different
    models are never compared (and one legend of every model's rows would hide the curves)."""
    return per_model_paths(PRETRAINED_PLOT, sorted({row.model for row in section.rows}))


def plot_name(task: str) -> str:
    return f"curves_{re.sub(r'[^A-Za-z0-9_.-]', '_', task)}.png"


def render_markdown(board: Leaderboard, export_path: str, out_dir: str) -> str:
    sources = export_path.split()  # several exports: space-separated, as --from-export takes them
    named = " and ".join(f"`{source}`" for source in sources)
    lines = [
        "# recipezoo leaderboard",
        "",
        f"Generated by `recipezoo leaderboard report` from {named} (MLflow experiment{'s' if len(sources) > 1 else ''} "
        f"`{board.experiment}`); never edit by hand. Regenerate with "
        f"`recipezoo leaderboard report --from-export {export_path} --out {out_dir}`.",
    ]
    if board.rows:
        lines += _render_main_table(board)
    if board.tool_use is not None:
        lines += render_tool_use(board.tool_use)
    for suite in board.tool_suites:
        lines += render_tool_suite(suite)
    if board.before_after is not None:
        lines += render_sft_pipeline(board.before_after)
        lines += render_before_after(board.before_after, pretrained_plots(board.before_after))
    return "\n".join(lines) + "\n"


def _render_main_table(board: Leaderboard) -> list[str]:
    lines = [
        "",
        "Each task cell is mean ± std (n) of the runs' final held-out accuracy over n seeds "
        "(std with ddof=1, n/a for one seed); *at step 0* is the mean before RL, where a row started "
        "(the warm-started model can differ between library releases). Wall time and generated tokens are "
        "means per run.",
        "",
        "## Evaluation protocol",
    ]
    for task in board.tasks:
        lines += ["", f"### {task} acc (`val/{task}/acc`)", "", "| protocol | value |", "|---|---|"]
        lines += [f"| {key.replace('_', '-')} | {md_cell(board.protocols[task][key])} |" for key in PROTOCOL_KEYS]
    order = f", sorted by {board.tasks[0]} acc" if board.tasks else ""
    header = ["recipe", "model", *[f"{task} acc{suffix}" for task in board.tasks for suffix in ("", " at step 0")],
              "seeds", "steps", "wall time", "generated tokens"]
    table = []
    for row in board.rows:
        accuracies = [(row.cells[t].text() if t in row.cells else "—", _optional_acc(row.start_acc(t)))
                      for t in board.tasks]
        cells = [row.recipe, row.model, *[text for pair in accuracies for text in pair],
                 str(row.seeds), steps_text(row.steps),
                 format_duration(row.wall_seconds) if row.wall_seconds is not None else "?",
                 format_tokens(row.generated_tokens)]
        table.append(cells)
    lines += ["", f"## Results{order}", "", *markdown_table(header, "ll" + "r" * (len(header) - 2), table)]
    curves = "held-out accuracy, tool-call rate" if board.tool_use is not None else "held-out accuracy"
    for task in board.tasks:
        lines += ["", f"![{task}: {curves} and training reward vs step]({plot_name(task)})"]
    return lines


def board_records(board: Leaderboard) -> list[dict]:
    """One flat dict per row, the same numbers the markdown shows (unrounded to 6 digits)."""
    records = []
    for row in board.rows:
        record: dict[str, Any] = {"recipe": row.recipe, "model": row.model}
        for task in board.tasks:
            cell = row.cells.get(task)
            record[f"{task}/acc_mean"] = round6(cell.mean) if cell else None
            record[f"{task}/acc_std"] = round6(cell.std) if cell else None
            record[f"{task}/acc_n"] = cell.n if cell else 0
            record[f"{task}/acc_step0_mean"] = round6(row.start_acc(task))
        record.update(seeds=row.seeds, steps=steps_text(row.steps, "-"), wall_seconds=round6(row.wall_seconds),
                      generated_tokens=round6(row.generated_tokens),
                      run_ids=" ".join(run["run_id"] for run in row.runs))
        records.append(record)
    return records


def _optional_acc(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def render_csv(board: Leaderboard) -> str:
    records = board_records(board)
    fields = list(records[0]) if records else ["recipe", "model", "seeds", "steps", "wall_seconds",
                                                "generated_tokens", "run_ids"]
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    writer.writerows(records)
    return out.getvalue()


def render_json(board: Leaderboard, export_path: str) -> str:
    data = {
        "generated_by": "recipezoo leaderboard",
        "source": export_path,
        "experiment": board.experiment,
        "columns": [{"metric": f"val/{task}/acc", "data_source": task, "protocol": board.protocols[task]}
                    for task in board.tasks],
        "rows": board_records(board),
    }
    if board.before_after is not None:
        data["before_after"] = before_after_records(board.before_after)
    if board.tool_use is not None:
        data["tool_use"] = tool_use_records(board.tool_use)
    if board.tool_suites:
        data["tool_suites"] = [tool_suite_records(suite) for suite in board.tool_suites]
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def plot_curves(board: Leaderboard, task: str, path: Path) -> Path:
    """Held-out `task` accuracy, the held-out tool-call rate (where runs call tools) and training reward vs step,
    one line per row."""
    several_models = len({row.model for row in board.rows}) > 1
    series = [((f"{row.recipe} · {row.model}" if several_models else row.recipe) + f" (n={row.seeds})", row.runs)
              for row in board.rows]
    protocol = board.protocols[task]
    panels = [(f"val/{task}/acc", f"held-out {task} acc ({protocol['temperature']}, {protocol['samples']})"),
              (TRAIN_REWARD_KEY, f"training reward ({TRAIN_REWARD_KEY})")]
    if board.tool_use is not None:
        panels.insert(1, (TOOL_CALL_RATE_KEY, "held-out tool-call rate (episodes that call a tool)"))
    return plot_seed_curves(series, panels, path)


def plot_pretrained_curves(section: BeforeAfter, model: str, path: Path, befores: list[dict]) -> Path:
    """Held-out accuracy (the runs' validation subset, greedy) and training reward vs step, one line per
    recipe of `model`: the mean over its seeds, shaded ±1 std. `befores`: the export's `before` evaluations, the
    step 0 of runs that did not validate then."""
    befores = [entry for entry in befores if str(entry.get("model")) == model]
    series = [(f"{row.recipe} (n={len(row.runs)})", [with_pretrained_start(member.train_run, befores)
                                                     for member in row.runs])
              for row in section.rows if row.model == model]
    acc_keys = sorted({key for _, runs in series for run in runs for key in run["history"] if is_task_acc_key(key)})
    panels = [(key, f"held-out {key[len('val/'):-len('/acc')]} acc during training") for key in acc_keys[:1]]
    if any(is_reasoning_gym(key[len("val/"):-len("/acc")]) for key in acc_keys):  # a suite: its mean over the tasks
        series = [(label, [with_suite_history(run, SUITE_CURVE_KEY) for run in runs]) for label, runs in series]
        panels = [(SUITE_CURVE_KEY, "held-out reasoning-gym suite mean during training (greedy, every test problem)")]
    return plot_seed_curves(series, panels + [(TRAIN_REWARD_KEY, f"training reward ({TRAIN_REWARD_KEY})")], path,
                            title=f"{model}: mean over seeds, shaded ±1 std")


def _display(path: str | Path) -> str:
    """A path as the reader would type it: relative to the working directory when inside it."""
    path = Path(path)
    if path.is_absolute():
        try:
            path = path.relative_to(Path.cwd())
        except ValueError:
            pass
    return path.as_posix()


def write_leaderboard(export: dict, out_dir: str | Path, export_path: str | Path | None = None) -> list[Path]:
    """Build the leaderboard (raising before anything is written) and write md, csv, json and plots.

    `export_path` is where `export` is kept (default `<out_dir>/runs.json`); the markdown names it
    as the source to regenerate from. Returns the written paths.
    """
    board = build_leaderboard(export)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    source = _display(export_path if export_path is not None else out / "runs.json")
    written = []
    for name, text in (("leaderboard.md", render_markdown(board, source, _display(out))),
                       ("leaderboard.csv", render_csv(board)),
                       ("leaderboard.json", render_json(board, source))):
        (out / name).write_text(text, encoding="utf-8")
        written.append(out / name)
    for task in board.tasks:
        written.append(plot_curves(board, task, out / plot_name(task)))
    if board.before_after is not None and board.before_after.rows:
        befores = [entry for entry in export.get("evals") or [] if entry["stage"] == "before"]
        written += [plot_pretrained_curves(board.before_after, model, out / plot, befores)
                    for model, plot in pretrained_plots(board.before_after).items()]
        written += write_schedule_plots(board.before_after, out)  # only where rows of several schedules sit
    recipes_dir = REPO_RESULTS.parent / "recipes"
    if out.resolve() == TINY_TABLE:  # the committed tiny-task table: the recipe READMEs show their rows too
        written += [Path(_display(path)) for path in update_tiny_readmes(board.rows, board.tasks, recipes_dir, source)]
    if out.resolve() == RECIPE_BASELINES:  # the recipes' recorded GSM8K baselines
        changed = update_gsm8k_readmes(board.before_after, recipes_dir, source, _display(out))
        written += [Path(_display(path)) for path in changed]
    if board.tool_use is not None and out.resolve().is_relative_to(REPO_RESULTS):
        board_dir = out.resolve().relative_to(REPO_RESULTS.parent).as_posix()
        changed = update_tool_use_readmes(board.tool_use, REPO_RESULTS.parent / "recipes", source, board_dir)
        written += [Path(_display(path)) for path in changed]
    return written
