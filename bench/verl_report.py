"""The side-by-side section of results/perf/README.md: ours vs verl vs TRL doing the same step on the same GPUs,
from the json files `bash bench/verl_suite.sh` writes into results/perf/ in one call.

Every run is reduced to the same rows: medians, over the steps after the first (vLLM's graph capture, the first
weight sync, one-off compiles), of each stage's seconds, the rest of the step, the step, tokens (prompt +
response) per second per GPU, and the highest per-GPU memory nvidia-smi saw during the run.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

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


def from_steps(steps: list[dict]) -> dict:
    """Rows of a run that logged our/verl's per-step metrics (`timing_s/*`, `perf/throughput`)."""
    kept = steps[1:] or steps

    def median(value) -> float:
        return statistics.median(value(s) for s in kept)

    rows = {stage: median(lambda s, stage=stage: stage_s(s, stage)) for stage in STAGES}
    rows["other"] = median(lambda s: s["timing_s/step"] - sum(stage_s(s, stage) for stage in STAGES))
    return {"rows": rows, "step": median(lambda s: s["timing_s/step"]),
            "tokens_per_s_per_gpu": median(lambda s: s["perf/throughput"]), "first_step": steps[0]["timing_s/step"],
            "steps": len(kept)}


def from_trl(report: dict) -> dict:
    """bench/trl_grpo_gpu.py's summary: its no-grad log-prob pass is the rest of _prepare_inputs."""
    summary, breakdown = report["summary"], report["summary"]["median_breakdown_s"]
    rows = {"gen": breakdown["gen"], "reward": breakdown["reward"], "old_log_prob": breakdown["old_log_prob_and_rest"],
            "update_actor": breakdown["update_actor"], "sync_weights": breakdown["sync_weights"]}
    rows["other"] = summary["median_step_s"] - sum(rows.values())
    return {"rows": rows, "step": summary["median_step_s"], "tokens_per_s_per_gpu": summary["tokens_per_s_per_gpu"],
            "first_step": report["steps"][0]["step_s"], "steps": len(summary["steps_summarized"])}


def load_run(path: Path, framework: str) -> dict:
    """One column: the run's rows, or its error when it did not finish a step."""
    report = json.loads(path.read_text())
    versions = report.get("versions") or {}
    engine = f" (vLLM {versions['vllm']})" if versions.get("vllm") else ""
    own = f" {versions[framework.lower()]}" if versions.get(framework.lower()) else ""
    run = {"label": f"{framework}{own}{engine}", "file": path.name, "device": report.get("device", "?"),
           "command": report.get("command", "?"), "config": report.get("config", {})}
    peaks = report.get("peak_memory_gib") or []
    run["peak_memory_gib"] = max(peaks) if peaks else None
    steps = report.get("steps") or []
    if isinstance(steps, dict):  # bench/scale_suite.py: {"<step>": metrics}, step 1 first
        steps = [steps[key] for key in sorted(steps, key=int) if "timing_s/step" in steps[key]]
    if "summary" in report:
        return run | from_trl(report)
    if report.get("returncode", 0) != 0 or not steps:
        error = report.get("error") or "no step finished"
        return run | {"error": f"exit {report.get('returncode')}: " + " / ".join(error.splitlines()[-6:])}
    return run | from_steps(steps)


def cell(run: dict, value: str) -> str:
    return "—" if "error" in run else value


def table(runs: list[dict]) -> list[str]:
    lines = ["| stage (s) | " + " | ".join(run["label"] for run in runs) + " |", "|---" * (len(runs) + 1) + "|"]
    for row in (*STAGES, "other"):
        lines.append(f"| {row} | " + " | ".join(cell(r, f"{r['rows'][row]:.2f}" if "rows" in r else "") for r in runs)
                     + " |")
    lines += [
        "| **step** | " + " | ".join(cell(r, f"**{r.get('step', 0):.2f}**") for r in runs) + " |",
        "| tokens/s/GPU | " + " | ".join(cell(r, f"{r.get('tokens_per_s_per_gpu', 0):,.0f}") for r in runs) + " |",
        "| peak GPU memory (GiB) | " + " | ".join(
            f"{r['peak_memory_gib']:.1f}" if r["peak_memory_gib"] is not None else "not recorded" for r in runs) + " |",
        "| first step (not in the medians) | " + " | ".join(cell(r, f"{r.get('first_step', 0):.2f}") for r in runs)
        + " |",
    ]
    return lines


def verdicts(runs: list[dict]) -> list[str]:
    """verl's step over ours (the target), over ours on verl's vLLM, and the stages where ours is slower."""
    done = [run for run in runs if "error" not in run]
    verl = next((run for run in done if run["label"].startswith("verl")), None)
    ours = [run for run in done if run["label"].startswith("ours")]
    if verl is None or not ours:
        return []
    lines = []
    for run in ours:
        speedup = verl["step"] / run["step"]
        target = "met" if speedup >= SPEEDUP_TARGET else f"missed by {SPEEDUP_TARGET - speedup:.2f}×"
        lines.append(f"- verl step / {run['label']} step: **{speedup:.2f}×** (target ≥ {SPEEDUP_TARGET}×: {target})")
        slower = [f"{row} by {run['rows'][row] - verl['rows'][row]:.2f} s" for row in (*STAGES, "other")
                  if run["rows"][row] - verl["rows"][row] >= 0.01]
        if slower:
            lines.append(f"  - {run['label']} is slower than verl at: {', '.join(slower)}")
    return lines


def setting(config: dict, dotted: str):
    """The value at a dotted key of a nested dict; None where the run did not record it."""
    for key in dotted.split("."):
        config = config.get(key) if isinstance(config, dict) else None
    return config


def shape_section(directory: Path, shape: str) -> list[str]:
    title, files = SHAPES[shape]
    runs = [load_run(directory / name, framework) for framework, name in files if (directory / name).exists()]
    if not any(run["label"].startswith("verl") for run in runs):
        return []
    devices = sorted({run["device"] for run in runs})
    counts = ", ".join(cell(run, str(run.get("steps"))) for run in runs)
    lines = [f"### {title}", "", f"Device: {', '.join(devices)}. Medians over the steps after the first ({counts} "
             "steps).", "", *table(runs), "", *verdicts(runs)]
    for run in runs:
        if "error" in run:
            lines.append(f"- {run['label']} ({run['file']}) did not finish: `{run['error']}`")
    verl = next(run for run in runs if run["label"].startswith("verl"))
    shown = [f"`{key.split('.', 1)[1]}={setting(verl['config'], key)}`" for key in SHOWN_SETTINGS
             if setting(verl["config"], key) is not None]
    if shown:
        lines += ["", "verl's speed settings, from the config its run recorded: " + ", ".join(shown) + "."]
    lines.append("")
    lines += [f"- {run['label']} (`{run['file']}`): `{run['command']}`" for run in runs]
    return lines + [""]


def verl_section(directory: Path) -> list[str]:
    body = [line for shape in SHAPES for line in shape_section(directory, shape)]
    if not body:
        return []
    return ["## Side by side: ours vs verl vs TRL, same GPUs, one call", "",
            "Each column ran in the same `bash bench/verl_suite.sh` call on the same machine, doing the same work "
            "per step (bench/verl_grpo_gpu.py lists verl's settings for each shape). `other` is the step's time "
            "outside the named stages (advantages, batch balancing, padding). verl computes rewards while it "
            "generates, so its `reward` is inside `gen`; verl recomputes the old policy's log-probs, ours skips "
            "that forward when a rollout gets one optimizer step (its own forward is π_old). Ours with vLLM 0.24.0 "
            "ran in verl's environment, so next to verl it differs only in the framework code.", "", *body]
