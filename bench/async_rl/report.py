"""results/async/README.md and results/async/timeline.png from the json files `bash bench/async_rl/suite.sh` wrote:

    python -m bench.async_rl.report            # every folder of results/async holding run jsons

One section per folder, i.e. per suite invocation: its runs ran one after the other on one machine at the same
settings, so each one's speed-up is against the sync run of the same folder. The plot draws one step of each run
(the one of median length after step 1): a bar per device, colored by stage, showing who computes when.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from bench.common.results_page import PLOT_DPI, load_results, number_cell, pyplot, table_header, table_row, write_page
from core.trainer.schedule import DEFAULT_MAX_STALENESS, SCHEDULES
from core.trainer.timeline import HOST, ROLLOUT, TRAIN, WEIGHT_SYNC, busy_shares

ROOT = Path(__file__).resolve().parents[2]
ORDER = {name: index for index, name in enumerate(SCHEDULES)}  # sync, one_step_off, async
GPU_COMMANDS = {  # what makes the GPU folders (issue 38's splits), random-init Qwen3-8B, on 141 GB GPUs: on 80 GB
    # ones the launch check refuses these settings (the update of 8B on 2 ranks needs more than 79 GiB a GPU).
    # one_step_off keeps the colocated engine awake through the update: on 2 GPUs its share and the micro-batch
    # shrink, on 4 the cached blocks go; every run of a folder shares them. `python -m bench.scale.plan --recipes
    # grpo --controllers torchrun --gpus 2 --full-gpus --tag T trainer.schedule=one_step_off OVERRIDES` (the same
    # batch per GPU): 94% of an H200 on 2 GPUs with these overrides (110% with expandable segments alone), 82% on 4.
    # One training GPU cannot hold 8B's training state (≈ 153 GiB, the dry run's estimate): offloaded to the host.
    "2 H200s": "bash bench/async_rl/suite.sh --model bench/configs/qwen3-8b --splits 1+1 --prompts 64 "
              "--out results/async/2gpu actor.expandable_segments=true rollout.gpu_memory_utilization=0.25 "
              "actor.micro_batch_size=16 --disaggregated-overrides actor.cpu_offload=true",
    "4 H200s": "bash bench/async_rl/suite.sh --model bench/configs/qwen3-8b --splits 2+2 1+3 --prompts 96 "
              "--out results/async/4gpu actor.expandable_segments=true",
    # One GPU holds no 8B training state beside an engine: Qwen3-1.7B, colocated schedules only. Memory per H200,
    # `python -m bench.scale.plan --recipes grpo --controllers torchrun --gpus 1 --full-gpus --config-dir
    # bench/configs/qwen3-1.7b --tag T data.train_batch_size=64 rollout.n=5 actor.ppo_mini_batch_size=32
    # data.max_response_length=1024 trainer.schedule=S`: sync 78.2 GiB (generation), one_step_off 96.2 (the update
    # beside the awake engine); measured 77.1 and 100.7.
    "1 H200 (Qwen3-1.7B)": "bash bench/async_rl/suite.sh --model bench/configs/qwen3-1.7b --schedules sync one_step_off "
                           "--gpus 1 --controller local --prompts 64 --out results/async/1gpu_1.7b "
                           "actor.expandable_segments=true",
}
STAGE_COLORS = {"generate": "tab:blue", "old_log_prob": "tab:orange", "update_actor": "tab:red",
                "sync_weights": "black", "reward": "tab:green", "adv": "tab:olive", "rollout_corr": "tab:purple",
                "values": "tab:brown", "update_critic": "tab:pink"}
LANES = {ROLLOUT: (0.45, 0.4), TRAIN: (0.05, 0.4), WEIGHT_SYNC: (0.05, 0.8), HOST: (0.05, 0.8)}  # role -> (y offset, height)


def staleness_bound(run: dict) -> int:
    if run["schedule"] == "async":
        return DEFAULT_MAX_STALENESS if run["max_staleness"] is None else run["max_staleness"]
    return SCHEDULES[run["schedule"]].max_staleness


def measured_steps(run: dict) -> list[int]:
    """The steady steps: after step 1 (one-off compiles and allocations; an off-policy schedule's first batch is
    generated on the spot) and before the last `bound` steps, which have no later batch left to generate beside
    them; all steps where that leaves none."""
    steps = sorted(step["step"] for step in run["timeline"]["steps"])
    return [step for step in steps if 2 <= step <= steps[-1] - staleness_bound(run)] or steps


def summarise(run: dict, sync_step_s: float | None) -> dict:
    """Means over the measured steps: sums of seconds and tokens, then one division."""
    steps = measured_steps(run)
    windows = {s["step"]: s["end"] - s["start"] for s in run["timeline"]["steps"]}
    wall = sum(windows[step] for step in steps)
    metrics = [run["steps"][str(step)] for step in steps]
    step_s = wall / len(steps)
    return {
        "step_s": step_s,
        "speed_up": sync_step_s / step_s if sync_step_s else None,
        "trained_tok_s_gpu": sum(m["perf/total_num_tokens"] for m in metrics) / wall / run["gpus"],
        "generated_tok_s_gpu": sum(m["rollout/generated_tokens"] for m in metrics) / wall / run["gpus"],
        "busy": busy_shares(run["timeline"], steps),
        "staleness": staleness_shares(run),
    }


def staleness_shares(run: dict) -> dict[int, float]:
    """versions behind -> share of all trained samples (every step trains on a batch of the same size)."""
    fractions = [metrics for _, metrics in sorted(run["steps"].items(), key=lambda item: int(item[0]))]
    prefix = "rollout_corr/staleness/frac_"
    versions = sorted({int(key.removeprefix(prefix)) for m in fractions for key in m if key.startswith(prefix)})
    return {v: statistics.mean(m.get(f"{prefix}{v}", 0.0) for m in fractions) for v in versions}


def device_roles(run: dict) -> dict[str, str]:
    """A device's role where the run keeps the roles apart (disaggregated); "" where both share it."""
    roles: dict[str, set] = {}
    for span in run["timeline"]["spans"]:
        if span["role"] in (TRAIN, ROLLOUT):
            for device in span["devices"]:
                roles.setdefault(device, set()).add(span["role"])
    return {device: next(iter(kinds)) if len(kinds) == 1 else "" for device, kinds in roles.items()}


def gpus_cell(run: dict) -> str:
    if run["placement"] == "colocated":
        return f"{run['gpus']} (colocated)"
    return f"{run['gpus']} ({run['rollout_gpus']} rollout + {run['train_gpus']} train)"


def busy_cell(run: dict, busy: dict[str, float]) -> str:
    roles = device_roles(run)
    return ", ".join(f"{device}{' ' + roles[device] if roles.get(device) else ''} {share:.0%}"
                     for device, share in busy.items())


def steps_cell(run: dict) -> str:
    """The measured steps, and where the suite's --timeout-s stopped the run if it did (a key older jsons lack)."""
    steps, stop = measured_steps(run), run.get("stopped_by_time_limit")
    return (f"{steps[0]}-{steps[-1]}" if len(steps) > 1 else str(steps[0])) + \
        (f" (stopped by the time limit {stop})" if stop else "")


def staleness_cell(shares: dict[int, float]) -> str:
    return ", ".join(f"{versions}: {share:.0%}" for versions, share in shares.items() if share > 0) or "–"


def memory_cell(run: dict) -> str:
    """Each GPU's peak as nvidia-smi counts it (whatever held it: engine, training state, caches), and of how much
    where the json has the totals (suites before the key: the peaks alone); none on a CPU."""
    peaks, totals = run.get("peak_memory_gib") or [], run.get("memory_total_gib") or []
    if not peaks:
        return "–"
    return " / ".join(number_cell(peak) for peak in peaks) + (f" of {number_cell(max(totals))}" if totals else "")


def overrides_note(run: dict) -> str:
    """The suite's overrides beyond its settings: they are part of what each row measured."""
    notes = [(" Every run also with", run["extra_overrides"]), (" The async runs also with", run["disaggregated_overrides"])]
    return "".join(f"{what} `{' '.join(overrides)}`." for what, overrides in notes if overrides)


def folder_section(folder: Path, runs: list[dict]) -> list[str]:
    """One invocation's table, and by how much each schedule slower than sync is slower."""
    sync = next((run for run in runs if run["schedule"] == "sync"), None)
    sync_step_s = summarise(sync, None)["step_s"] if sync else None
    first = runs[0]
    lines = [f"## {folder.name}: {first['device']}", "",
             f"`{first['suite_command']}` — model {first['model']}; {first['prompts']} prompts × {first['n']} "
             f"samples a step, responses up to {first['response_length']} tokens, {first['total_steps']} steps; "
             f"commit {first['commit'][:10]}.{overrides_note(first)}", "",
             *(["Measured on a CPU, where the rollout and the update share the same cores: this checks the suite "
                "and its accounting, it measures no GPU speed-up.", ""] if first["device"].startswith("CPU") else []),
             *table_header("run", "schedule", "GPUs", "steps measured", "step s", "speed-up vs sync", "trained tok/s/GPU",
                           "generated tok/s/GPU", "busy share per device", "staleness: versions behind, share",
                           "peak GiB per GPU",
                           right_aligned=("step s", "speed-up vs sync", "trained tok/s/GPU", "generated tok/s/GPU"))]
    slower = []
    for run in runs:
        summary = summarise(run, sync_step_s)
        lines.append(table_row([
            run["name"], run["schedule"], gpus_cell(run), steps_cell(run), f"{summary['step_s']:.3g}",
            number_cell(summary["speed_up"], ".2f") + ("×" if summary["speed_up"] else ""),
            f"{summary['trained_tok_s_gpu']:.0f}", f"{summary['generated_tok_s_gpu']:.0f}",
            busy_cell(run, summary["busy"]), staleness_cell(summary["staleness"]), memory_cell(run)]))
        if summary["speed_up"] and summary["speed_up"] < 1:
            slower.append(f"- {run['name']}: a step takes {1 / summary['speed_up']:.2f}× sync's; its panel of "
                          f"the timeline shows where its devices wait.{stages_note(run, sync)}")
    return lines + ([""] + slower if slower else []) + [""]


def stage_seconds(run: dict) -> dict[str, float]:
    """Mean seconds a measured step spends in generation (in the background for an off-policy schedule), old
    log-probs and the update: each stage's own clock, so stages that overlap each count in full."""
    metrics = [run["steps"][str(step)] for step in measured_steps(run)]
    generation = "timing_s/gen_background" if any(m.get("timing_s/gen_background") for m in metrics) else "timing_s/gen"
    keys = {"generation": generation, "old log-probs": "timing_s/old_log_prob", "update": "timing_s/update_actor"}
    return {stage: statistics.mean(m.get(key, 0.0) for m in metrics) for stage, key in keys.items()}


def stages_note(run: dict, sync: dict | None) -> str:
    """Each stage's time beside sync's where they overlap on shared devices: a stage that takes longer beside
    another than alone shows the two sharing a device that was already busy, not filling its idle time."""
    if sync is None or run["placement"] != "colocated":
        return ""
    ours, alone = stage_seconds(run), stage_seconds(sync)
    cells = ", ".join(f"{stage} {ours[stage]:.3g} s (sync {alone[stage]:.3g})" for stage in ours)
    return f" Its stages, each on its own clock, overlapping: {cells}."


def typical_step(run: dict) -> dict:
    """The measured step of median length: what one step of this schedule looks like."""
    measured = measured_steps(run)
    steps = [s for s in run["timeline"]["steps"] if s["step"] in measured]
    return sorted(steps, key=lambda s: s["end"] - s["start"])[(len(steps) - 1) // 2]


def draw_step(axis, run: dict, width_s: float) -> None:
    """A row per device (the host last), each role in its own lane, spans clipped to the step."""
    step = typical_step(run)
    devices = run["timeline"]["devices"]
    for span in run["timeline"]["spans"]:
        start, end = max(span["start"], step["start"]), min(span["end"], step["end"])
        if end <= start:
            continue
        offset, height = LANES[span["role"]]
        for device in span["devices"]:
            axis.broken_barh([(start - step["start"], end - start)], (devices.index(device) + offset, height),
                             color=STAGE_COLORS.get(span["stage"], "gray"))
    roles = device_roles(run)
    axis.set_yticks([index + 0.45 for index in range(len(devices))],
                    [f"{device} {roles.get(device, '')}".strip() for device in devices])
    axis.set_ylim(0, len(devices))
    axis.set_xlim(0, width_s)
    axis.invert_yaxis()
    axis.set_title(f"{run['name']}: step {step['step']}, {step['end'] - step['start']:.2f} s", fontsize=9)


def plot(folders: dict[Path, list[dict]], out: Path) -> None:
    plt = pyplot()
    panels = [(folder, run) for folder, runs in folders.items() for run in runs]
    figure, axes = plt.subplots(len(panels), 1, figsize=(10, 1.2 + 1.1 * sum(
        len(run["timeline"]["devices"]) for _, run in panels)), squeeze=False)
    # One time scale per folder, so that its schedules' steps compare by length.
    widths = {folder: max(step["end"] - step["start"] for step in map(typical_step, runs))
              for folder, runs in folders.items()}
    for axis, (folder, run) in zip(axes[:, 0], panels):
        draw_step(axis, run, widths[folder])
        axis.set_title(f"{folder.name} · {axis.get_title()}", fontsize=9)
    axes[-1, 0].set_xlabel("seconds since the step started (on each device: training above, rollout below)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=color) for color in STAGE_COLORS.values()]
    figure.legend(handles, list(STAGE_COLORS), loc="upper center", ncol=5, fontsize=8)
    figure.tight_layout(rect=(0, 0, 1, 0.94))
    figure.savefig(out, dpi=PLOT_DPI)
    plt.close(figure)


def page(folders: dict[Path, list[dict]], plot_name: str) -> list[str]:
    lines = [
        "# Asynchronous GRPO: sync, one_step_off and async side by side",
        "",
        "Generated by `python -m bench.async_rl.report` from the json files in the folders beside it; each folder is "
        "one invocation of `bash bench/async_rl/suite.sh` (setup: `pip install -e . -r bench/requirements-gpu.txt`), "
        "whose runs ran one after the other on one machine at the same settings. A run's speed-up is against the "
        "sync run of its own folder.",
        "",
        "*step s*: mean wall seconds of the steady steps: after step 1 (one-off compiles and allocations; an "
        "off-policy schedule's first batch is generated on the spot) and before the last 1 (one_step_off) or "
        "max_staleness (async) steps, which have no later batch left to generate beside them. *trained "
        "tok/s/GPU*: prompt and response tokens of the batches trained on, per second of step, per GPU of the "
        "run; *generated*: response tokens. *busy share*: the part of the steps' wall time in which a device "
        "generates, computes log-probs, updates or loads weights (core/trainer/timeline.py); the rest it waits. "
        "*staleness*: the share of trained samples generated that many weight versions before the weights that "
        "train on them, over all steps.",
        "",
    ]
    for folder, runs in folders.items():
        lines += folder_section(folder, runs)
    lines += [f"![one step of each run: who computes when]({plot_name})", "",
              "## The GPU runs", "",
              "Random-init Qwen3-8B (bench/configs/qwen3-8b; Qwen3-1.7B on one GPU; nothing to download but GSM8K), "
              "the GRPO script recipes/grpo/run_qwen3_8b.sh scaled as bench/scale/suite.py does it:", ""]
    lines += [f"- {gpus}: `{command}`" for gpus, command in GPU_COMMANDS.items()]
    return lines + ["", "then `python -m bench.async_rl.report`."]


def load_folders(root: Path) -> dict[Path, list[dict]]:
    folders = {}
    for folder in sorted(path for path in root.iterdir() if path.is_dir()):
        runs = load_results(folder.glob("*.json"))
        if runs:
            folders[folder] = sorted(runs, key=lambda run: (ORDER[run["schedule"]], run["gpus"], run["name"]))
    return folders


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=ROOT / "results/async")
    args = parser.parse_args(argv)
    folders = load_folders(args.results)
    if not folders:
        raise SystemExit(f"async_report: no run jsons in the folders of {args.results}: run bench/async_rl/suite.sh")
    plot(folders, args.results / "timeline.png")
    print(write_page(args.results / "README.md", page(folders, "timeline.png")).read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
