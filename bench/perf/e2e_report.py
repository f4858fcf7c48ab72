"""The end-to-end section of results/perf/README.md: our GRPO step vs TRL's, from e2e_ours.json (written by
bench/common/grpo_vllm_gpu.py) and e2e_trl.json (bench/perf/trl_grpo_gpu.py), both from `bench/perf/e2e_suite.sh`."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from bench.common.results_page import pyplot, save_plot, stacked_barh, table_header, target_verdict
from bench.common.suite_calls import separation

SPEEDUP_TARGET = 1.5
# Our stage -> the row it lands in; TRL's phases are mapped onto the same rows by trl_grpo_gpu.py.
ROWS = ("gen", "reward", "old_log_prob", "update_actor", "sync_weights")


def _ours(report: dict) -> dict:
    kept = report["steps"][1:] or report["steps"]  # the first step is warm-up (graph capture, allocator)
    med = {key: statistics.median(s.get(f"timing_s/{key}", 0.0) for s in kept) for key in ROWS + ("step",)}
    tokens_per_s = statistics.median(s["perf/throughput"] for s in kept)
    return {"step": med["step"], "rows": {k: med[k] for k in ROWS}, "tokens_per_s_per_gpu": tokens_per_s,
            "steps": len(kept), "device": report["device"], "command": report["command"],
            "first_step": report["steps"][0]["timing_s/step"]}


def trl_summary(report: dict) -> dict:
    """bench/perf/trl_grpo_gpu.py's summary as stage rows (its no-grad log-prob pass is the rest of `_prepare_inputs`)."""
    summary, breakdown = report["summary"], report["summary"]["median_breakdown_s"]
    rows = {"gen": breakdown["gen"], "reward": breakdown["reward"],
            "old_log_prob": breakdown["old_log_prob_and_rest"], "update_actor": breakdown["update_actor"],
            "sync_weights": breakdown["sync_weights"]}
    return {"step": summary["median_step_s"], "rows": rows, "tokens_per_s_per_gpu": summary["tokens_per_s_per_gpu"],
            "steps": len(summary["steps_summarized"]), "device": report.get("device", "?"),
            "command": " ".join(["python"] + command) if isinstance(command := report.get("command", "?"), list)
            else command, "first_step": report["steps"][0]["step_s"]}


def load_pair(directory: Path) -> tuple[dict, dict] | None:
    ours, trl = directory / "e2e_ours.json", directory / "e2e_trl.json"
    if not (ours.exists() and trl.exists()):
        return None
    return _ours(json.loads(ours.read_text())), trl_summary(json.loads(trl.read_text()))


def separated(directory: Path, pair: tuple[dict, dict]) -> str | None:
    """Why ours and TRL's files cannot be compared (bench/common/suite_calls.py), None where they can."""
    return separation(directory, ("e2e_ours.json", "e2e_trl.json"), (pair[0]["device"], pair[1]["device"]))


def e2e_section(directory: Path) -> list[str]:
    pair = load_pair(directory)
    if pair is None:
        return []
    ours, trl = pair
    title = "## End to end: one GRPO step, ours vs TRL GRPOTrainer (vLLM colocate)"
    why = separated(directory, pair)
    if why:
        apart = ("ours and TRL ran in different calls (calls.json)" if why == "call"
                 else f"ours ran on {ours['device']} and TRL on {trl['device']}")
        return [title, "", f"Not compared: {apart}; a later call re-ran one of them. `bash bench/perf/e2e_suite.sh` "
                "runs both on one GPU.", ""]
    speedup = trl["step"] / ours["step"]
    lines = [title, "",
             f"Same GPU ({ours['device']}), the two runs back to back, same work per step; medians over {ours['steps']} and "
             f"{trl['steps']} steps after a warm-up step. Speed-up = TRL step time / ours: **{speedup:.2f}×** "
             f"(target ≥ {SPEEDUP_TARGET}×: {target_verdict(speedup, SPEEDUP_TARGET, '{:.2f}×')}).", "",
             *table_header("stage (s)", "ours", "TRL", "TRL − ours")]
    for row in ROWS:
        lines.append(f"| {row} | {ours['rows'][row]:.2f} | {trl['rows'][row]:.2f} | "
                     f"{trl['rows'][row] - ours['rows'][row]:+.2f} |")
    lines += [f"| **step** | **{ours['step']:.2f}** | **{trl['step']:.2f}** | {trl['step'] - ours['step']:+.2f} |",
              f"| tokens/s/GPU | {ours['tokens_per_s_per_gpu']:,.0f} | {trl['tokens_per_s_per_gpu']:,.0f} | |",
              f"| first step (warm-up, not in the medians) | {ours['first_step']:.2f} | {trl['first_step']:.2f} | "
              f"{trl['first_step'] - ours['first_step']:+.2f} |", "",
              "Ours skips the old-policy forward (`actor.recompute_old_log_probs=auto`: one optimizer step per "
              "rollout, so the update's own forward is π_old); TRL recomputes it by default for its vLLM "
              "importance-sampling correction. Our first step carries the one-off torch.compile of the decoder "
              "blocks and the log-prob head.", "",
              "TRL's rows come from its own profiling contexts: `old_log_prob` is the rest of `_prepare_inputs` "
              "(its no-grad log-prob pass plus padding and advantages), `update_actor` the rest of the step.", "",
              f"- ours: `{ours['command']}`", f"- TRL: `{trl['command']}`", ""]
    return lines


def write_e2e_plot(directory: Path) -> list[str]:
    pair = load_pair(directory)
    if pair is None or separated(directory, pair):
        (directory / "e2e_breakdown.png").unlink(missing_ok=True)  # an earlier pair's plot no longer stands
        return []
    fig, ax = pyplot().subplots(figsize=(6, 2.8))
    stacked_barh(ax, [("TRL", pair[1]["rows"]), ("ours", pair[0]["rows"])], ROWS)
    ax.set_xlabel("seconds per GRPO step")
    ax.legend(ncol=2, fontsize=8, loc="upper right")  # beside the shorter (ours) bar
    ax.set_title("End-to-end GRPO step breakdown, one GPU")
    return [save_plot(fig, directory / "e2e_breakdown.png")]
