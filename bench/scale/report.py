"""results/scale/README.md and scale.png from the results/scale/*.json that bench/scale/suite.sh wrote,
the plans bench/scale/plan.py wrote (plan_*.json) and the verl numbers bench/scale/verl_published_8gpu.json cites.

    python -m bench.scale.report [--dir results/scale]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from bench.common.results_page import load_results, number_cell, pyplot, save_plot, stacked_barh, table_header, table_row
from bench.scale.suite import PROMPTS_PER_GPU

ROOT = Path(__file__).resolve().parents[2]
STAGE_ORDER = ("gen", "old_log_prob", "values", "adv", "update_critic", "update_actor", "sync_weights")
PUBLISHED = ROOT / "bench/scale/verl_published_8gpu.json"
DEVICES = ("H100 80GB", "H200 141GB")  # the plan's devices, in bench/scale/plan.py's order
SCALING_TARGET = 0.85  # tokens/s per GPU at 8 GPUs over at 2
STEP_TARGET_S = {"dapo": 45.0}  # a recipe's step-time target on 2 GPUs at the scaled settings
MFU_TARGET = 0.45  # the update's MFU inside a full run
COVERAGE = ((2, "torchrun"), (2, "ray"), (4, "torchrun"), (4, "ray"))  # the table each recipe should have: GPUs, controller


def table(results: list[dict]) -> list[str]:
    lines = table_header("recipe", "GPUs", "controller", "settings", "step s", "start s", "gen s", "update s", "sync s",
                         "gen tok/s/GPU", "vs raw vLLM", "trained tok/s/GPU", "update MFU", "peak GiB per GPU")
    for r in results:
        stages = r["stages_s"]
        memory = (f"{' / '.join(number_cell(p) for p in r['peak_memory_gib'])} of "
                  f"{number_cell(max(r['memory_total_gib'], default=None))}")
        lines.append(table_row([
            r["recipe"], str(r["gpus"]), r["controller"], r.get("settings", "scaled"), step_cell(r),
            number_cell(r.get("start_s", {}).get("total"), ".0f"),
            number_cell(stages.get("gen")), number_cell(stages.get("update_actor")),
            number_cell(stages.get("sync_weights")), number_cell(r["generated_tokens_per_s_per_gpu"], ".0f"),
            number_cell(r.get("gen_vs_raw_vllm"), ".0%"), number_cell(r["trained_tokens_per_s_per_gpu"], ".0f"),
            number_cell(r["update_mfu"], ".1%"), memory]))
    return lines


def step_cell(result: dict) -> str:
    """The median step, and where the suite's --timeout-s stopped the run, after which of its steps. A run
    stopped before any step after the first shows that first step (compiles and allocations included) instead,
    with its slowest stages: the only time it measured."""
    stop = result.get("stopped_by_time_limit")
    cell = number_cell(result["median_step_s"])
    first = (result.get("steps") or {}).get("1", {})
    if result["median_step_s"] is None and first.get("timing_s/step"):
        stages = sorted(((key.removeprefix("timing_s/"), value) for key, value in first.items()
                         if key.startswith("timing_s/") and key != "timing_s/step"), key=lambda kv: -kv[1])
        cell = (f"step 1 only: {first['timing_s/step']:.1f} ("
                + ", ".join(f"{name} {seconds:.1f}" for name, seconds in stages[:3]) + ")")
    return cell + (f" (stopped by the time limit {stop})" if stop else "")


def coverage(results: list[dict]) -> list[str]:
    """Which of each recipe's GPU counts and controllers have a measured run: how many, and the fastest steady step
    (or `step 1 only`, or `–` for none), so the rows still missing read at a glance."""
    lines = ["", "Which rows exist: runs per recipe, GPU count and controller, with the fastest steady step among them.",
             "", *table_header("recipe", *(f"{gpus} GPUs, {controller}" for gpus, controller in COVERAGE))]
    for recipe in sorted(PROMPTS_PER_GPU):
        cells = []
        for gpus, controller in COVERAGE:
            runs = [r for r in results if (r["recipe"], r["gpus"], r["controller"]) == (recipe, gpus, controller)]
            steps = [r["median_step_s"] for r in runs if r["median_step_s"] is not None]
            best = f"{min(steps):.1f} s" if steps else "step 1 only"
            cells.append(f"{len(runs)} run{'s' * (len(runs) > 1)}, {best}" if runs else "–")
        lines.append(table_row([recipe, *cells]))
    return lines


def plot(results: list[dict], out: Path) -> None:
    fig, ax = pyplot().subplots(figsize=(9, 0.6 * len(results) + 1.8))
    stacked_barh(ax, [(f"{r['recipe']} {r['gpus']}gpu {r['controller']}", r["stages_s"]) for r in results],
                 tuple(stage for stage in STAGE_ORDER if any(r["stages_s"].get(stage) for r in results)))
    ax.set_xlabel("seconds per step (median after step 1)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)  # beside the bars, never over them
    save_plot(fig, out)


def scaling(results: list[dict]) -> list[str]:
    """Tokens/s per GPU at 8 GPUs over at 2, per recipe and controller, where both were run."""
    runs = {(r["recipe"], r["controller"], r["gpus"]): r for r in results}
    pairs = [(recipe, controller) for recipe, controller, gpus in sorted(runs) if gpus == 8
             and (recipe, controller, 2) in runs]
    if not pairs:
        return []
    lines = ["", f"Scaling from 2 to 8 GPUs: tokens/s per GPU at 8 ÷ at 2 (target ≥ {SCALING_TARGET:.0%}).", "",
             *table_header("recipe", "controller", "generated tok/s/GPU", "trained tok/s/GPU")]
    for recipe, controller in pairs:
        two, eight = runs[recipe, controller, 2], runs[recipe, controller, 8]
        cells = [_ratio(eight[key], two[key]) for key in ("generated_tokens_per_s_per_gpu", "trained_tokens_per_s_per_gpu")]
        lines.append(f"| {recipe} | {controller} | {cells[0]} | {cells[1]} |")
    return lines


def _ratio(top: float | None, bottom: float | None) -> str:
    return "–" if not top or not bottom else f"{top:.0f} ÷ {bottom:.0f} = {top / bottom:.0%}"


def step_targets(results: list[dict]) -> list[str]:
    """For each 2-GPU run of a recipe with a step target: the step its own stages allow once the update runs at
    MFU_TARGET and the old-policy pass is gone (bypass mode), and the update MFU the target would need with the rest
    of the step as measured. The update's FLOPs are fixed by the batch; only its speed can change."""
    rows = [r for r in results if r["recipe"] in STEP_TARGET_S and r["gpus"] == 2 and r["update_mfu"]]
    if not rows:
        return []
    lines = ["", "What a step target asks of the update: the measured step less its update and old-policy pass (the "
             "rest: generation, reward, sync, overhead), the step with the update at "
             f"{MFU_TARGET:.0%} MFU and no old-policy pass, and the update MFU the target needs on top of the rest.",
             "", *table_header("recipe", "controller", "settings", "step s", "rest s", "update s (MFU)",
                               f"step at {MFU_TARGET:.0%} MFU, no old-policy pass", "target s", "MFU the target needs")]
    for r in rows:
        stages, target = r["stages_s"], STEP_TARGET_S[r["recipe"]]
        update = stages.get("update_actor") or 0.0
        rest = r["median_step_s"] - update - (stages.get("old_log_prob") or 0.0)
        flops_s = update * r["update_mfu"]  # seconds the update would take at 100% MFU
        needed = "unreachable (the rest alone exceeds it)" if rest >= target else f"{flops_s / (target - rest):.0%}"
        lines.append(table_row([r["recipe"], r["controller"], r.get("settings", "scaled"),
                                number_cell(r["median_step_s"]), number_cell(rest),
                                f"{update:.1f} ({r['update_mfu']:.1%})", number_cell(rest + flops_s / MFU_TARGET),
                                f"{target:.0f}", needed]))
    return lines


def plan_section(plans: list[dict]) -> list[str]:
    lines = ["## The plan without a GPU: each script's dry run and its memory per GPU", "",
             "From the plan_*.json files beside this README, which `python -m bench.scale.plan` wrote (no GPU): "
             "each run_qwen3_8b.sh's own `--dry-run` with the suite's overrides, under torchrun and under Ray. "
             "At 2 and 4 GPUs the settings are the suite's default (the script's batch cut to PROMPTS_PER_GPU "
             "prompts per GPU, `rollout.gpu_memory_utilization=0.35`; `scaled` alone is without expandable "
             "segments, as the suite ran before they were its default); at 8 GPUs they are the script's own "
             "(`bash bench/scale/suite.sh --full`). A settings cell with overrides is the plan of suite runs made "
             "with them (`python -m bench.scale.plan --gpus 2 4 --full-gpus --tag T OVERRIDES`, as "
             "`bash bench/scale/suite.sh --tag T OVERRIDES` names the runs). Memory per GPU is `per_gpu_memory` in "
             "core/trainer/memory_estimate.py, in GiB as nvidia-smi counts it: FSDP2 shards the fp32 weights, "
             "gradients, AdamW moments and reference (and PPO's critic) over the GPUs (under "
             "`actor.tensor_parallel_size` the embeddings, LM head and norms, which tensor parallel leaves whole, "
             "over the data-parallel GPUs alone); the update also holds the copies FSDP2 gathers (its root unit, "
             "two layers, their gradients, the LM head's fp32 gradient) and "
             "one micro-batch's activations, its rows packed at the training data's mean prompt length and full "
             "responses, with the scripts' gradient checkpointing; generation holds the state without gradients "
             "plus vLLM's share (`gpu_memory_utilization` of the GPU: its bf16 weights and the peak of the forward "
             "it profiles at start, then the KV cache). Both "
             "phases add the CUDA runtime (context, NCCL and cuBLAS workspaces, CUDA graphs: 3.4 GiB) and the "
             "training phase the blocks PyTorch's caching allocator keeps from earlier micro-batches of other "
             "lengths (1.6 more sets of the token-sized activations): those two are fit on the measured H200 "
             "rows, not derived. GPUs as nvidia-smi counts them: H100 79.6 GiB, H200 140.4 GiB.", "",
             *table_header("recipe", "GPUs", "controller", "settings", "prompts × n",
                           "sequences per GPU per mini-batch", "micro-batch", "tokens per micro-batch", "fp32 weights",
                           "grads", "AdamW", "reference", "gathered", "activations", "allocator cache",
                           "training peak", "engine share (80 / 141)", "generation peak (80 / 141)",
                           "peak of 80 GB", "peak of 141 GB")]
    return lines + [plan_row(p) for p in plans] + ["", "What the arithmetic says (the same under both controllers):",
                                                    ""] + plan_findings(plans)


def plan_row(p: dict) -> str:
    batch, memory = p["plan"]["batch"], p["memory_per_gpu"]
    first = memory[DEVICES[0]]  # the sharded state, gathered copies and activations do not depend on the GPU
    state = first["state_gib"]
    return table_row([
        p["recipe"], str(p["gpus"]), p["controller"], p["settings"],
        f"{batch['prompts_per_step']} × {p['plan']['rollout']['n']}", str(batch["sequences_per_mini_batch_per_device"]),
        f"{batch['micro_batch_size']} × {batch['grad_accumulation_steps']}", str(first["micro_batch_tokens"]),
        *(number_cell(state[part]) for part in ("weights", "grads", "optimizer", "reference")),
        number_cell(sum(first["gathered_gib"].values())), number_cell(sum(first["activations_gib"].values())),
        number_cell(first["allocator_cache_gib"]), number_cell(first["training_peak_gib"]),
        _per_device(memory, "rollout_gib", "share"), _per_device(memory, "generation_peak_gib"),
        *(_verdict(memory[d]) for d in DEVICES)])


def measured_vs_plan(results: list[dict], plans: list[dict]) -> list[str]:
    """Each measured run beside its plan's estimate for the same recipe, GPUs, controller and settings,
    on the plan's device nearest the measured one's memory."""
    planned = {(p["recipe"], p["gpus"], p["controller"], p["settings"]): p for p in plans}
    lines = []
    for r in results:
        plan = planned.get((r["recipe"], r["gpus"], r["controller"], r.get("settings", "scaled")))
        if plan is None or not r["peak_memory_gib"]:
            continue
        total = max(r["memory_total_gib"])
        device = min(DEVICES, key=lambda d: abs(plan["memory_per_gpu"][d]["capacity_gib"] - total))
        estimate = plan["memory_per_gpu"][device]
        measured = max(r["peak_memory_gib"])
        lines.append(table_row([r["recipe"], str(r["gpus"]), r["controller"], r.get("settings", "scaled"), device,
                                " / ".join(number_cell(x) for x in r["peak_memory_gib"]),
                                f"{measured / total:.1%}", number_cell(estimate["peak_gib"]),
                                f"{estimate['peak_fraction']:.1%}",
                                f"{100 * (estimate['peak_fraction'] - measured / total):+.1f}"]))
    if not lines:
        return []
    return ["", "Measured peaks beside the plan's estimate (the fullest GPU; target: within ± 5 points):", "",
            *table_header("recipe", "GPUs", "controller", "settings", "device", "measured GiB per GPU", "measured",
                          "estimated GiB", "estimated", "points off"), *lines]


def _per_device(memory: dict, key: str, part: str | None = None) -> str:
    return " / ".join(number_cell(memory[d][key][part] if part else memory[d][key]) for d in DEVICES)


def _verdict(memory: dict) -> str:
    return f"{memory['peak_fraction']:.0%} ({'fits' if memory['fits'] else 'over'} ≤ 95%)"


def plan_findings(plans: list[dict]) -> list[str]:
    seen: dict[tuple, list[str]] = {}
    for p in plans:
        for finding in p["findings"]:
            seen.setdefault((p["recipe"], p["gpus"], p["settings"], finding), []).append(p["controller"])
    if not seen:
        return ["- nothing: every setting fits and divides."]
    return [f"- {recipe}, {gpus} GPUs ({settings} settings): {finding}." for recipe, gpus, settings, finding in seen]


def verl_section(published: dict, results: list[dict]) -> list[str]:
    lines = ["## Published verl numbers beside our 8-GPU rows (citations)", "",
             "From bench/scale/verl_published_8gpu.json: numbers as verl published them, not measured here; the medians "
             "over the listed steps after step 1 are computed here, as ours are.", ""]
    for entry in published["entries"]:
        lines += verl_entry(entry, [r for r in results if r["gpus"] == 8 and r["recipe"] == entry["compare_with_recipe"]])
    return lines + ["Not found:", ""] + [f"- {item}" for item in published["not_found"]]


def verl_entry(entry: dict, ours: list[dict]) -> list[str]:
    steps = [s for s in entry["published"]["steps"] if s["step"] >= 2]
    medians = [number_cell(statistics.median(s[key] for s in steps), spec) for key, spec in (
        ("timing_s/step", ".1f"), ("timing_s/gen", ".1f"), ("timing_s/update_actor", ".1f"), ("perf/throughput", ".0f"))]
    lines = [f"**[{entry['title']}]({entry['source_url']})**, {entry['date']}. Model: {entry['model']}. "
             f"Hardware: {entry['hardware']}. "
             + " ".join(f"{key.capitalize()}: {value}." for key, value in entry["settings"].items()), "",
             *table_header("run", "GPUs", "step s", "gen s", "update s", "tokens/s per GPU (prompt + response)"),
             f"| verl, published (steps {', '.join(str(s['step']) for s in steps)}) | 8 | {' | '.join(medians)} |"]
    lines += [f"| ours, {r['recipe']} {r['controller']} | 8 | {number_cell(r['median_step_s'])} | "
              f"{number_cell(r['stages_s'].get('gen'))} | {number_cell(r['stages_s'].get('update_actor'))} | "
              f"{number_cell(r['trained_tokens_per_s_per_gpu'], '.0f')} |" for r in ours]
    if not ours:
        lines.append(f"| ours, recipes/{entry['compare_with_recipe']}/run_qwen3_8b.sh | 8 | not run yet | | | |")
    return lines + ["", f"How the settings differ: {entry['differences']}", ""]


def build_readme(folder: Path, published_path: Path = PUBLISHED) -> str:
    """The README's text; draws scale.png beside it when there are measured results."""
    results = sorted(load_results(p for p in folder.glob("*_*gpu_*.json") if not p.name.startswith("plan_")),
                     key=lambda r: (r["recipe"], r["gpus"], r["controller"]))
    plans = sorted(load_results(folder.glob("plan_*.json")), key=lambda p: (p["recipe"], p["gpus"], p["controller"]))
    lines = ["# Qwen3-8B at scale: each recipe's run_qwen3_8b.sh, a few steps", "",
             "Generated by `python -m bench.scale.report` from the json files beside it, which "
             "`bash bench/scale/suite.sh` wrote (setup: `pip install -e . -r bench/requirements-gpu.txt`). "
             "Weights are random, built from bench/configs/qwen3-8b (`model.init=random`): speed and memory "
             "depend on the shapes, not on trained weights. Times are medians over the steps after step 1; "
             "MFU counts the update's useful FLOPs over 989 TFLOP/s per GPU; peak memory is nvidia-smi's; start is the "
             "time to the first step (under Ray: the cluster, its workers, then each role's loads and the engines), "
             "each phase in the json's `start_s`. A *settings* cell names the suite's settings: `scaled` (the "
             "script's batch cut to PROMPTS_PER_GPU prompts per GPU) or `script` (its own, `--full`), then each "
             "override. The scaled settings now include `actor.expandable_segments=true` (the suite's "
             "SUITE_DEFAULTS): a row of `scaled` alone was made before, with the allocator's default "
             "(`--no-expandable-segments` makes it again).", ""]
    lines += table(results) if results else ["No results yet: run `bash bench/scale/suite.sh` on a GPU node."]
    lines += ["", "Each json holds the exact command, the commit and every step's metrics."] + coverage(results)
    lines += scaling(results)
    lines += step_targets(results)
    if results:
        plot(results, folder / "scale.png")
        lines += ["", "![per-stage step time](scale.png)"]
    if plans:
        lines += [""] + plan_section(plans) + measured_vs_plan(results, plans)
    lines += [""] + verl_section(json.loads(published_path.read_text()), results)
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default=str(ROOT / "results/scale"))
    folder = Path(parser.parse_args().dir)
    (folder / "README.md").write_text(build_readme(folder))


if __name__ == "__main__":
    main()
