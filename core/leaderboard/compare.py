"""`recipezoo leaderboard compare`: one plot of a recipe's curves from tables that each hold another budget (a
learning rate, a sampling temperature, a mini-batch size), which no single table may mix: what was tried, seen
side by side.

    recipezoo leaderboard compare "T 0.7=results/leaderboard/gsm8k_coder/runs.json:grpo" \\
        "T 1.0=results/leaderboard/gsm8k_coder_t1.0/runs.json:grpo" --out compare.png
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from core.leaderboard.eval_columns import with_pretrained_start
from core.leaderboard.export import TRAIN_REWARD_KEY, LeaderboardError, is_task_acc_key, load_export
from core.leaderboard.seed_stats import plot_seed_curves


def parse_series(spec: str) -> tuple[str, Path, str]:
    """`LABEL=RUNS_JSON:RECIPE` -> (label, export path, recipe)."""
    label, equals, rest = spec.partition("=")
    path, colon, recipe = rest.rpartition(":")
    if not equals or not colon or not label or not path or not recipe:
        raise LeaderboardError(f"series {spec!r}: expected LABEL=RUNS_JSON:RECIPE, e.g. "
                               "'T 1.0=results/leaderboard/gsm8k_coder_t1.0/runs.json:grpo'")
    if not Path(path).is_file():
        raise LeaderboardError(f"series {spec!r}: no export at {path}")
    return label, Path(path), recipe


def series_runs(label: str, path: Path, recipe: str) -> tuple[str, list[dict]]:
    """The recipe's training runs in the export, each with the pretrained model's step 0 where it did not
    validate then; labelled with their count."""
    export = load_export(path)
    runs = [run for run in export["runs"] if run["recipe"] == recipe]
    if not runs:
        found = sorted({run["recipe"] for run in export["runs"]})
        raise LeaderboardError(f"{path}: no runs of recipe {recipe!r} (it has {', '.join(found) or 'none'})")
    befores = [entry for entry in export.get("evals", []) if entry.get("stage") == "before"]
    return f"{label} (n={len(runs)})", [with_pretrained_start(run, befores) for run in runs]


def compare_plot(specs: list[str], out: Path) -> Path:
    """The first held-out accuracy every series validated, and the training reward, one line per series (the
    mean over its runs, shaded ±1 std)."""
    series = [series_runs(*parse_series(spec)) for spec in specs]  # every spec checked before anything is drawn
    keys = [{key for run in runs for key in run["history"] if is_task_acc_key(key)} for _, runs in series]
    shared = sorted(set.intersection(*keys))
    if not shared:
        raise LeaderboardError("the series share no held-out accuracy to compare: "
                               + "; ".join(f"{label}: {', '.join(sorted(k)) or 'none'}"
                                           for (label, _), k in zip(series, keys)))
    held_out = shared[0]
    panels = [(held_out, f"held-out {held_out[len('val/'):-len('/acc')]} acc during training"),
              (TRAIN_REWARD_KEY, f"training reward ({TRAIN_REWARD_KEY})")]
    return plot_seed_curves(series, panels, out, title="mean over each series' runs, shaded ±1 std")


def compare_command(args: argparse.Namespace) -> int:
    try:
        path = compare_plot(args.series, Path(args.out))
    except LeaderboardError as error:
        print(f"recipezoo leaderboard compare: {error}", file=sys.stderr)
        return 1
    print(f"wrote {path}", flush=True)
    return 0


def add_parser(actions) -> None:
    compare = actions.add_parser("compare", help="plot one recipe's curves from tables of different budgets "
                                 "side by side (LABEL=RUNS_JSON:RECIPE ...)")
    compare.add_argument("series", nargs="+", metavar="LABEL=RUNS_JSON:RECIPE",
                         help="a line of the plot: the recipe's runs in that export, under that label")
    compare.add_argument("--out", required=True, metavar="PNG", help="where to write the plot")
    compare.set_defaults(handler=compare_command)
