"""The section results/perf/README.md leads with: ours vs verl vs TRL at two shapes on one GPU, one call, from the
results/perf/sbs_<shape>_<framework>.json files `bash bench/perf/side_by_side.sh` writes (bench/perf/side_by_side_run.py).

Every column is reduced to medians over the steps after the first (graph capture, first weight sync, compiles) of
each stage's seconds, `other` (the rest of the step), the step, tokens per second per GPU and the engine/trainer
log-prob drift, beside the GPU's peak memory. A column that could not run says why, with the error its run left.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from bench.common.results_page import pyplot, save_plot, stacked_barh, table_header, table_row, target_verdict
from bench.common.suite_calls import separation
from bench.perf.side_by_side import FRAMEWORKS, SHAPES
from bench.perf.side_by_side_run import STAGES

TARGETS = {"verl": 2.0, "trl": 2.5}  # their step over ours, at both shapes
LABELS = {"ours": "ours", "verl": "verl", "trl": "TRL"}
PLOT = "side_by_side.png"


def median_rows(steps: list[dict]) -> dict:
    """Medians over `steps` of each stage, `other`, the step, tokens/s/GPU and the drift gauges present."""
    def median(values) -> float | None:
        values = [value for value in values if value is not None]
        return statistics.median(values) if values else None

    rows = {stage: median(s["stages_s"][stage] for s in steps) for stage in STAGES}
    rows["other"] = median(s["step_s"] - sum(s["stages_s"].values()) for s in steps)
    rows["step"] = median(s["step_s"] for s in steps)
    rows["tokens_per_s_per_gpu"] = median(s.get("tokens_per_s_per_gpu") for s in steps)
    for gauge in ("logprob_diff", "prob_diff"):
        for part in ("mean", "max"):
            rows[f"{gauge}_{part}"] = median((s.get(gauge) or {}).get(part) for s in steps)
    return rows


def load_column(path: Path) -> dict:
    report = json.loads(path.read_text())
    versions = report.get("versions") or {}
    own = versions.get(report["framework"])
    label = LABELS[report["framework"]] + (f" {own}" if own else "")
    if versions.get("vllm"):
        label += f" (vLLM {versions['vllm']})"
    run = {"framework": report["framework"], "label": label, "file": path.name, "device": report.get("device") or "?",
           "command": report["command"], "settings": report.get("settings") or {},
           "peak_memory_gib": report.get("peak_memory_gib"), "steps_done": len(report["steps"])}
    if len(report["steps"]) < 2:
        why = report.get("error") or ("still running" if report.get("returncode") is None else "no step after the first")
        return run | {"error": f"exit {report.get('returncode')}: " + " / ".join(why.splitlines()[-6:])}
    if report.get("returncode") not in (0, None):
        run["stopped"] = f"exit {report['returncode']} after {len(report['steps'])} steps"
    return run | {"rows": median_rows(report["steps"][1:])}


def shape_columns(directory: Path, shape: str) -> tuple[list[dict], list[str]]:
    """The shape's columns measured in ours' call (calls.json), and a line for each left out."""
    columns = [load_column(directory / f"sbs_{shape}_{fw}.json") for fw in FRAMEWORKS
               if (directory / f"sbs_{shape}_{fw}.json").exists()]
    ours = next((c for c in columns if c["framework"] == "ours"), None)
    if ours is None:
        return [], []
    kept, left = [], []
    for run in columns:
        why = separation(directory, (run["file"], ours["file"]), (run["device"], ours["device"]))
        if why:
            left.append(f"- {run['label']} (`{run['file']}`) left out: it ran in another "
                        f"{'call (calls.json)' if why == 'call' else 'machine'} than ours")
        else:
            kept.append(run)
    return kept, left


def cell(run: dict, key: str, spec: str) -> str:
    value = run.get("rows", {}).get(key)
    return "—" if value is None else format(value, spec)


def table(runs: list[dict]) -> list[str]:
    lines = table_header("stage (s)", *(run["label"] for run in runs))
    lines += [table_row([row, *(cell(r, row, ".2f") for r in runs)]) for row in (*STAGES, "other")]
    lines += [table_row(["**step**", *(f"**{cell(r, 'step', '.2f')}**" for r in runs)]),
              table_row(["tokens/s/GPU", *(cell(r, "tokens_per_s_per_gpu", ",.0f") for r in runs)]),
              table_row(["peak GPU memory (GiB)", *("—" if r["peak_memory_gib"] is None else f"{r['peak_memory_gib']:.1f}"
                                                    for r in runs)]),
              table_row(["rollout/logprob_diff mean / max (\\|Δ log p\\|)",
                         *(f"{cell(r, 'logprob_diff_mean', '.4f')} / {cell(r, 'logprob_diff_max', '.3f')}" for r in runs)]),
              table_row(["verl's drift gauge, \\|Δp\\| mean / max",
                         *(f"{cell(r, 'prob_diff_mean', '.4f')} / {cell(r, 'prob_diff_max', '.3f')}" for r in runs)])]
    return lines


def verdicts(runs: list[dict]) -> list[str]:
    ours = next((r for r in runs if r["framework"] == "ours" and "rows" in r), None)
    if ours is None:
        return ["- ours has no step after the first: no ratio"]
    lines = []
    for run in runs:
        if run["framework"] in TARGETS and "rows" in run:
            ratio, target = run["rows"]["step"] / ours["rows"]["step"], TARGETS[run["framework"]]
            lines.append(f"- {run['label']} step / ours: **{ratio:.2f}×** (target ≥ {target}×: "
                         f"{target_verdict(ratio, target, '{:.2f}×')})")
    return lines


def shape_section(directory: Path, shape: str) -> list[str]:
    runs, left = shape_columns(directory, shape)
    if not runs:
        return []
    devices = ", ".join(sorted({run["device"] for run in runs}))
    lines = [f"### {SHAPES[shape].title}", "", f"Device: {devices}. Random-init weights (speed and memory only). "
             "Medians over the steps after the first.", "", *table(runs), "", *verdicts(runs)]
    for run in runs:
        if "error" in run:
            lines.append(f"- {run['label']} (`{run['file']}`) could not run: `{run['error']}`")
        elif "stopped" in run:
            lines.append(f"- {run['label']} (`{run['file']}`) stopped early: {run['stopped']}")
    lines += left + [""]
    for run in runs:
        settings = ", ".join(f"`{key}={value}`" for key, value in run["settings"].items())
        lines.append(f"- {run['label']}{f' ({settings})' if settings else ''}: `{run['command']}`")
    return lines + [""]


def side_by_side_section(directory: Path) -> list[str]:
    body = [line for shape in SHAPES for line in shape_section(directory, shape)]
    if not body:
        return []
    plot = [f"![{PLOT}]({PLOT})", ""] if (directory / PLOT).exists() else []
    return ["## Ours vs verl vs TRL on one GPU, one call, two shapes", "", *plot,
            "Each column ran in the same call on the same GPU, one after another (`bash bench/perf/side_by_side.sh`), "
            "doing the same work per step: the prompts, samples, lengths, one optimizer step per rollout, lr, clip, "
            "token-mean loss, no KL and a reward that varies within groups (bench/perf/side_by_side.py). "
            "`old_log_prob` holds every forward before the update (TRL's: the rest of its `_prepare_inputs`); "
            "ours skips it when one optimizer step covers the rollout and takes the drift from the update's own "
            "forward. verl reports its drift as |Δp| (probability), ours and TRL as |Δ log p|.", "", *body]


def write_side_by_side_plot(directory: Path) -> list[str]:
    """side_by_side.png: one panel per shape, each framework's median step as stacked stage bars."""
    panels = [(shape, [r for r in shape_columns(directory, shape)[0] if "rows" in r]) for shape in SHAPES]
    panels = [(shape, runs) for shape, runs in panels if runs]
    if not panels:
        (directory / PLOT).unlink(missing_ok=True)
        return []
    fig, axes = pyplot().subplots(len(panels), 1, figsize=(7, 1.6 + 0.8 * sum(len(r) for _, r in panels)),
                                  squeeze=False)
    for ax, (shape, runs) in zip(axes[:, 0], panels):
        stacked_barh(ax, [(run["label"], run["rows"]) for run in reversed(runs)], (*STAGES, "other"), fontsize=8)
        ax.set_xlabel("seconds per step (median after the first; random-init weights)")
        ax.set_title(SHAPES[shape].title, fontsize=9)
    handles, names = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, names, ncol=len(names), fontsize=7, loc="lower center")
    return [save_plot(fig, directory / PLOT, rect=(0, 0.06, 1, 1))]
