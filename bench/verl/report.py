"""The side-by-side section of results/perf/README.md: ours vs verl vs TRL doing the same step on the same GPUs,
from the json files `bash bench/verl/suite.sh` writes into results/perf/ in one call.

Every run is reduced to the same rows: medians, over the steps after the first (vLLM's graph capture, the first
weight sync, one-off compiles), of each stage's seconds, the rest of the step, the step, tokens (prompt +
response) per second per GPU, and the highest per-GPU memory nvidia-smi saw during the run.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from bench.common.results_page import pyplot, save_plot, stacked_barh, table_header, table_row, target_verdict
from bench.common.suite_calls import separation
from bench.perf.e2e_report import trl_summary

SPEEDUP_TARGET = 1.25
STAGES = ("gen", "reward", "old_log_prob", "update_actor", "sync_weights")
# The same stage under verl's name: its weight push from the FSDP actor into vLLM.
ALIASES = {"sync_weights": ("sync_weights", "update_weights")}
# (label, file) of the runs of each shape, in table order; a missing file leaves its column out.
SHAPES = {
    "grpo": ("One GRPO step: Qwen3-0.6B, 32 prompts × 8, 1 GPU",
             [("ours", "e2e_ours.json"), ("ours", "e2e_ours_vllm024.json"), ("verl", "e2e_verl.json"),
              ("TRL", "e2e_trl.json")]),
    "dapo8b": ("One DAPO step: Qwen3-8B, 16 prompts × 16, responses up to 2048 tokens, 2 GPUs",
               [("ours", "dapo8b_ours.json"), ("verl", "dapo8b_verl.json")]),
}
# Each shape's numerics beside verl (bench/verl/suite.sh: bench/verl/numerics.py on ours' step-2 batch): the rows
# shown, as max |ours − verl|.
NUMERIC_ROWS = (("old_log_probs", "old log-probs"), ("advantages", "advantages"), ("pg_loss", "loss at ratio 1"),
                ("pg_loss_perturbed", "loss at the perturbed ratios"))
# verl's speed settings, read back from the config its run recorded.
SHOWN_SETTINGS = ("actor_rollout_ref.model.use_remove_padding", "actor_rollout_ref.actor.use_dynamic_bsz",
                  "actor_rollout_ref.actor.ppo_max_token_len_per_gpu",
                  "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu", "actor_rollout_ref.actor.strategy",
                  "actor_rollout_ref.rollout.enforce_eager", "actor_rollout_ref.rollout.free_cache_engine",
                  "actor_rollout_ref.rollout.gpu_memory_utilization",
                  "actor_rollout_ref.model.enable_gradient_checkpointing",
                  # set where flash-attn is absent (sdpa, and then no remove padding): verl not at its best
                  "actor_rollout_ref.model.override_config.attn_implementation")


def stage_s(step: dict, stage: str) -> float:
    return next((step[f"timing_s/{name}"] for name in ALIASES.get(stage, (stage,)) if f"timing_s/{name}" in step), 0.0)


def stage_rows(steps: list[dict]) -> dict:
    """Each stage's median seconds over `steps`, and `other`: the rest of each step, then its median."""
    def median(value) -> float:
        return statistics.median(value(s) for s in steps)

    rows = {stage: median(lambda s, stage=stage: stage_s(s, stage)) for stage in STAGES}
    rows["other"] = median(lambda s: s["timing_s/step"] - sum(stage_s(s, stage) for stage in STAGES))
    return rows


def from_steps(steps: list[dict]) -> dict:
    """Rows of a run that logged our/verl's per-step metrics (`timing_s/*`, `perf/throughput`): medians over the
    steps after the first, and the first step on its own. A run that finished only its first step has no medians."""
    run = {"first_step": steps[0]["timing_s/step"], "first_rows": stage_rows(steps[:1]), "steps": len(steps) - 1}
    kept = steps[1:]
    if not kept:
        return run
    run |= {"rows": stage_rows(kept), "step": statistics.median(s["timing_s/step"] for s in kept),
            "tokens_per_s_per_gpu": statistics.median(s["perf/throughput"] for s in kept)}
    if all("perf/mfu/actor" in s for s in kept):  # verl's own MFU estimate of its update
        run["update_mfu"] = statistics.median(s["perf/mfu/actor"] for s in kept)
    return run


def from_trl(report: dict) -> dict:
    """bench/perf/trl_grpo_gpu.py's stage rows, plus `other`: the rest of its median step."""
    trl = trl_summary(report)
    rows = dict(trl["rows"], other=trl["step"] - sum(trl["rows"].values()))
    return {"rows": rows, **{key: trl[key] for key in ("step", "tokens_per_s_per_gpu", "first_step", "steps")}}


def load_run(path: Path, framework: str) -> dict:
    """One column: the run's rows, or its error when it did not finish a step."""
    report = json.loads(path.read_text())
    versions = report.get("versions") or {}
    engine = f" (vLLM {versions['vllm']})" if versions.get("vllm") else ""
    own = f" {versions[framework.lower()]}" if versions.get(framework.lower()) else ""
    run = {"label": f"{framework}{own}{engine}", "file": path.name, "device": report.get("device", "?"),
           "command": report.get("command", "?"), "config": report.get("config", {}),
           # bench/verl/grpo_gpu.py records use_remove_padding=false for --packing off and where flash-attn is absent
           "padded": setting(report.get("config", {}), "actor_rollout_ref.model.use_remove_padding") is False}
    peaks = report.get("peak_memory_gib") or []
    run["peak_memory_gib"] = max(peaks) if peaks else None
    steps = report.get("steps") or []
    if isinstance(steps, dict):  # bench/scale/suite.py: {"<step>": metrics}, step 1 first
        steps = [steps[key] for key in sorted(steps, key=int) if "timing_s/step" in steps[key]]
    if "summary" in report:
        return run | from_trl(report)
    if not steps:
        error = report.get("error") or "no step finished"
        return run | {"error": f"exit {report.get('returncode')}: " + " / ".join(error.splitlines()[-6:])}
    if report.get("wall_s") is not None:  # the run's start and shutdown: what its steps leave of its wall time
        run["outside_steps_s"] = report["wall_s"] - sum(step["timing_s/step"] for step in steps)
    if report.get("returncode", 0) != 0:  # stopped (its time limit) or crashed after some steps: keep those steps
        run["stopped"] = f"exit {report['returncode']} after {len(steps)} step(s), {report.get('wall_s', 0):.0f} s in all"
    return run | from_steps(steps)


def cell(run: dict, value: str) -> str:
    return "—" if "error" in run else value


def stage_table(runs: list[dict], key: str) -> list[str]:
    """One row per stage from each run's `key` rows (medians after the first step, or the first step); "—" where
    the run has none."""
    lines = table_header("stage (s)", *(run["label"] for run in runs))
    for row in (*STAGES, "other"):
        lines.append(table_row([row, *(f"{r[key][row]:.2f}" if key in r else "—" for r in runs)]))
    return lines


def table(runs: list[dict]) -> list[str]:
    def median_cell(run: dict, value: str) -> str:
        return value if "rows" in run else "—"

    lines = stage_table(runs, "rows") + [
        table_row(["**step**", *(median_cell(r, f"**{r.get('step', 0):.2f}**") for r in runs)]),
        table_row(["tokens/s/GPU", *(median_cell(r, f"{r.get('tokens_per_s_per_gpu', 0):,.0f}") for r in runs)]),
        table_row(["peak GPU memory (GiB)", *(f"{r['peak_memory_gib']:.1f}" if r["peak_memory_gib"] is not None
                                              else "not recorded" for r in runs)]),
        table_row(["first step (not in the medians)", *(cell(r, f"{r.get('first_step', 0):.2f}") for r in runs)]),
        table_row(["start + shutdown (wall − steps)", *(f"{r['outside_steps_s']:.0f}" if "outside_steps_s" in r
                                                        else "not recorded" for r in runs)]),
    ]
    if any("first_step" in run and "rows" not in run for run in runs):
        lines += ["", "A run finished only its first step, so the first steps by stage (each includes its "
                  "framework's one-time warm-up: graph capture, first weight sync, first allocations):", "",
                  *stage_table(runs, "first_rows")]
    return lines


def verdicts(runs: list[dict]) -> list[str]:
    """verl's step over ours (the target), over ours on verl's vLLM, and the stages where ours is slower. Where verl
    finished only its first step, its first step over ours instead, which the target does not measure."""
    done = [run for run in runs if "error" not in run]
    verl = next((run for run in done if run["label"].startswith("verl")), None)
    ours = [run for run in done if run["label"].startswith("ours")]
    if verl is None or not ours:
        return []
    steady = "rows" in verl
    step, rows = ("step", "rows") if steady else ("first_step", "first_rows")
    lines = [] if steady else [f"- verl finished only its first step ({verl.get('stopped', '')}): its steps after "
                               "the first, which the target compares, were not measured. First steps:"]
    for run in ours:
        if rows not in run:
            continue
        speedup = verl[step] / run[step]
        if steady:
            target = target_verdict(speedup, SPEEDUP_TARGET, "{:.2f}×")
            target += ", against verl without sequence packing" if verl["padded"] else ""
            lines.append(f"- verl step / {run['label']} step: **{speedup:.2f}×** (target ≥ {SPEEDUP_TARGET}×: {target})")
        else:
            lines.append(f"  - verl first step / {run['label']} first step: **{speedup:.2f}×**")
        slower = [f"{row} by {run[rows][row] - verl[rows][row]:.2f} s" for row in (*STAGES, "other")
                  if run[rows][row] - verl[rows][row] >= 0.01]
        if slower:
            lines.append(f"  - {run['label']} is slower than verl at: {', '.join(slower)}")
    return lines + padded_note(verl)


def padded_note(verl: dict) -> list[str]:
    """Where verl ran without sequence packing, what that means for the ratios above."""
    if not verl["padded"]:
        return []
    mfu = f" (its own MFU figure for the update, `perf/mfu/actor`: {verl['update_mfu']:.1%})" if "update_mfu" in verl \
        else ""
    return [f"- verl ran without sequence packing (no flash-attn, or `--packing off`): padded micro-batches through "
            f"PyTorch's SDPA{mfu}. That is not verl at its best (bench/README.md): the ratios above compare ours with "
            "this verl, not with verl packing its sequences."]


def numerics_lines(directory: Path, shape: str) -> list[str]:
    """One line: the largest |ours − verl| of each computation on the same rollout, or why it was not measured."""
    path = directory / f"{shape}_numerics.json"
    if not path.exists():
        return []
    report = json.loads(path.read_text())
    if "error" in report:
        return [f"- Numerics beside verl (`{path.name}`) not measured: `{' / '.join(report['error'].splitlines()[-3:])}`"]
    diffs = report["max_abs_diff"]
    cells = ", ".join(f"{label} {diffs[key]:.1e}" for key, label in NUMERIC_ROWS if key in diffs)
    ours_only = "" if report.get("verl_log_probs") else " (verl's old log-probs not computed: its loss took ours)"
    return [f"- Numerics beside verl on ours' step-2 rollout ({report['rows']} responses, {report['response_tokens']:,} "
            f"response tokens), the largest |ours − verl|: {cells}{ours_only}{rewards_note(report)} (`{path.name}`)."]


def rewards_note(report: dict) -> str:
    """What the advantage and loss rows compared: synthetic rewards, or zeros (a file from before
    bench/verl/numerics.py substituted varied rewards, on a rollout whose groups all scored alike)."""
    rewards = report.get("rewards")
    if rewards is not None:
        return "" if rewards == "the rollout's" else ("; advantages and losses on synthetic rewards that vary within "
                                                       "groups (the rollout's groups all scored alike)")
    losses = report.get("pg_loss") or {}
    zeros = losses.get("ours") == losses.get("verl") == 0.0 and report["max_abs_diff"].get("advantages") == 0
    return ("; advantages and losses were 0 in both (no group's rewards varied in this rollout), so only the old "
            "log-probs were really compared") if zeros else ""


def setting(config: dict, dotted: str):
    """The value at a dotted key of a nested dict; None where the run did not record it."""
    for key in dotted.split("."):
        config = config.get(key) if isinstance(config, dict) else None
    return config


def other_call(directory: Path, run: dict, verl: dict) -> str | None:
    """Why `run` was not measured in verl's call (a later call re-ran only part of the suite), None where it was."""
    why = separation(directory, (run["file"], verl["file"]), (run["device"], verl["device"]))
    return {"call": "it ran in another call (calls.json)", "device": f"it ran on {run['device']}"}.get(why)


def shape_runs(directory: Path, shape: str) -> tuple[list[dict], list[dict]]:
    """The shape's columns that ran in verl's call, and those from another call or machine; nothing without a verl
    run."""
    runs = [load_run(directory / name, framework) for framework, name in SHAPES[shape][1]
            if (directory / name).exists()]
    verl = next((run for run in runs if run["label"].startswith("verl")), None)
    if verl is None:
        return [], []
    for run in runs:
        run["elsewhere"] = other_call(directory, run, verl)
    elsewhere = [run for run in runs if run["elsewhere"]]
    return [run for run in runs if run not in elsewhere], elsewhere


def shape_section(directory: Path, shape: str) -> list[str]:
    runs, elsewhere = shape_runs(directory, shape)
    if not runs:
        return []
    title, verl = SHAPES[shape][0], next(run for run in runs if run["label"].startswith("verl"))
    devices = sorted({run["device"] for run in runs})
    counts = ", ".join(cell(run, str(run.get("steps"))) for run in runs)
    lines = [f"### {title}", "", f"Device: {', '.join(devices)}. Medians over the steps after the first ({counts} "
             "steps).", "", *table(runs), "", *verdicts(runs)]
    for run in runs:
        if "error" in run:
            lines.append(f"- {run['label']} ({run['file']}) did not finish: `{run['error']}`")
        elif "stopped" in run:
            lines.append(f"- {run['label']} ({run['file']}) stopped before its last step: {run['stopped']}")
    lines += [f"- {run['label']} ({run['file']}) left out: {run['elsewhere']}, not in verl's call"
              for run in elsewhere]
    lines += numerics_lines(directory, shape)
    shown = [f"`{key.split('.', 1)[1]}={setting(verl['config'], key)}`" for key in SHOWN_SETTINGS
             if setting(verl["config"], key) is not None]
    if shown:
        lines += ["", "verl's speed settings, from the config its run recorded: " + ", ".join(shown) + "."]
    lines.append("")
    lines += [f"- {run['label']} (`{run['file']}`): `{run['command']}`" for run in runs]
    return lines + [""]


def flash_check_lines(directory: Path) -> list[str]:
    """bench/verl/flash_attn_check.py's verdict as the suite kept it before verl's run, and the check's first line."""
    path = directory / "flash_attn_check.txt"
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    verdict = next((line.split(":", 1)[1].strip() for line in reversed(lines) if line.startswith("flash_attn_check:")),
                   "no verdict (the check did not finish)")
    return [f"flash-attn's GPU check before verl's run (`{path.name}`): {verdict}; {lines[0] if lines else ''}", ""]


def verl_section(directory: Path) -> list[str]:
    body = [line for shape in SHAPES for line in shape_section(directory, shape)]
    if not body:
        return []
    body = flash_check_lines(directory) + body
    return ["## Side by side: ours vs verl vs TRL, same GPUs, one call", "",
            "Each column ran in the same call on the same machine (`bash bench/verl/suite.sh` runs them all; a column "
            "from another call or machine is left out), doing the same work per step (bench/verl/grpo_gpu.py lists verl's "
            "settings for each shape). `other` is the step's time outside the named stages (advantages, batch "
            "balancing, padding). verl computes rewards while it "
            "generates, so its `reward` is inside `gen`; verl recomputes the old policy's log-probs, ours skips "
            "that forward when a rollout gets one optimizer step (its own forward is π_old). Ours with vLLM 0.24.0 "
            "ran in verl's environment, so next to verl it differs only in the framework code.", "", *body]


def write_verl_plot(directory: Path) -> list[str]:
    """verl_side_by_side.png: one panel per shape, each column's step as stacked stage bars: medians after the
    first step, or the first steps where verl has no later one (as the tables compare them)."""
    finished = {shape: [run for run in shape_runs(directory, shape)[0] if "error" not in run] for shape in SHAPES}
    panels = [(shape, runs) for shape, runs in finished.items() if any(r["label"].startswith("verl") for r in runs)]
    if not panels:
        return []
    fig, axes = pyplot().subplots(len(panels), 1, figsize=(7, 1.5 + 0.7 * sum(len(runs) for _, runs in panels)),
                                  squeeze=False)
    for ax, (shape, runs) in zip(axes[:, 0], panels):
        verl = next(run for run in runs if run["label"].startswith("verl"))
        key = "rows" if "rows" in verl else "first_rows"
        bars = [(run["label"] + ("\n(padded: no sequence packing)" if run["padded"] else ""), run[key])
                for run in reversed(runs) if key in run]
        stacked_barh(ax, bars, (*STAGES, "other"), fontsize=8)
        ax.set_xlabel("seconds per step" + ("" if key == "rows" else " (first steps: verl made no second)"))
        ax.set_title(SHAPES[shape][0], fontsize=9)
    handles, names = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, names, ncol=len(names), fontsize=7, loc="lower center")
    return [save_plot(fig, directory / "verl_side_by_side.png", rect=(0, 0.05, 1, 1))]
