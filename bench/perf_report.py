"""results/perf/README.md and its plots from the json files the device runs wrote into results/perf/.

    python bench/perf_report.py [--dir results/perf]

Nothing here is measured or typed by hand: every number comes from a json file that a bench
script wrote on the GPU, and each table names that script's command.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

TARGETS = {"rollout": 0.95, "mfu": 0.40, "e2e_speedup": 1.5}
E2E_STAGES = ("gen", "reward", "old_log_prob", "update_actor", "sync_weights")


def load(directory: Path, pattern: str) -> list[dict]:
    return [json.loads(p.read_text()) | {"_file": p.name} for p in sorted(directory.glob(pattern))]


def variant_label(v: dict) -> str:
    return v["variant"] + (f" @{v['micro_batch_tokens']} tok" if v.get("micro_batch_tokens") else "")


def train_section(runs: list[dict]) -> list[str]:
    if not runs:
        return []
    lines = ["## Policy update: tokens/s and MFU", "",
             "One optimizer step over an RL-shaped batch (prompts 64–256 tokens, responses 32–1024, GRPO's "
             "clipped loss). MFU counts useful FLOPs only, over 989 TFLOP/s (dense bf16); see "
             "`bench/train_mfu_gpu.py`.", "",
             "| model | variant | tokens/s | MFU | step (s) | peak memory (GiB) | target MFU |",
             "|---|---|---|---|---|---|---|"]
    for run in runs:
        for v in run["variants"]:
            if "error" in v:
                lines.append(f"| {run['model']} | {variant_label(v)} | {v['error']} | | | | |")
                continue
            target = ""
            if v["variant"].startswith("ours") and "1.7b" in run["model"]:
                gap = TARGETS["mfu"] - v["mfu"]
                target = f"≥ {TARGETS['mfu']:.0%}: " + ("met" if gap <= 0 else f"missed by {gap:.1%}")
            lines.append(f"| {run['model']} | {variant_label(v)} | {v['tokens_per_s']:,.0f} | {v['mfu']:.1%} | "
                         f"{v['median_step_s']:.2f} | {v['peak_memory_gib']:.1f} | {target} |")
    lines += [""] + [f"- `{run['model']}`: {run['tokens']:,} real tokens in {run['rows']} rows "
                     f"({run['padded_tokens']:,} padded), {run['device']}, torch {run['torch']}; packed vs padded "
                     f"max |Δ log p| on the GPU {run['packed_vs_padded_max_abs_logprob_diff']:.3g}; "
                     f"`{run['command']}`" for run in runs]
    return lines + [""]


def rollout_section(runs: list[dict]) -> list[str]:
    if not runs:
        return []
    lines = ["## Rollout: our vLLM backend vs raw vLLM vs our HF backend; weight sync", "",
             "| model | raw vLLM tok/s | ours (vLLM) tok/s | ours / raw | ours (HF) tok/s | engine start (s) | "
             "weight sync FSDP2→vLLM | sleep frees |", "|---|---|---|---|---|---|---|---|"]
    for run in runs:
        med = {k: statistics.median(v) for k, v in run["tokens_per_s"].items()}
        ratio = run["ours_over_raw"]
        verdict = "met" if ratio >= TARGETS["rollout"] else f"missed by {TARGETS['rollout'] - ratio:.1%}"
        hf = f"{run['hf_tokens_per_s']:,.0f}" if "hf_tokens_per_s" in run else "not run"
        sync = run.get("weight_sync")
        sync_text = f"{sync['gb_per_s']:.1f} GB/s ({sync['bytes'] / 1e9:.2f} GB in {min(sync['seconds']):.2f} s)" \
            if sync else "not run"
        lines.append(f"| {run['model']} | {med['raw vllm.LLM.generate']:,.0f} | {med['recipezoo VLLMRollout']:,.0f} | "
                     f"**{ratio:.1%}** ({verdict}) | {hf} | {run['engine_start_s']:.0f} | {sync_text} | "
                     f"{run['sleep']['freed_gib']:.1f} GiB |")
    first = runs[0]
    lines += ["", f"{first['prompts']} prompts × {first['prompt_len']} tokens → {first['new_tokens']} new tokens, "
              f"{first['sampling']}; vLLM {first['vllm']} with CUDA graphs, dummy weights; {first['device']}. "
              "Ours/raw is the ratio of medians over alternating rounds on one engine (target ≥ 95%).", ""]
    lines += [f"- `{run['command']}`" for run in runs]
    return lines + [""]


def write_plots(directory: Path, train: list[dict], rollout: list[dict]) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    if train:
        fig, ax = plt.subplots(figsize=(6, 3.5))
        labels, values = [], []
        for run in train:
            for v in run["variants"]:
                if "mfu" in v:
                    labels.append(f"{run['model'].removeprefix('train_')}\n{variant_label(v)}")
                    values.append(100 * v["mfu"])
        ax.bar(labels, values, color=["tab:blue" if "ours" in lab else "tab:gray" for lab in labels])
        ax.axhline(100 * TARGETS["mfu"], color="tab:red", linestyle="--", label="target (1.7B)")
        ax.set_ylabel("MFU (%)")
        ax.set_title("Policy update MFU, one GPU")
        ax.legend()
        fig.tight_layout()
        fig.savefig(directory / "train_mfu.png", dpi=120)
        written.append("train_mfu.png")
    if rollout:
        fig, ax = plt.subplots(figsize=(6, 3.5))
        names = [run["model"] for run in rollout]
        width = 0.27
        for i, (key, label) in enumerate([("raw vllm.LLM.generate", "raw vLLM"), ("recipezoo VLLMRollout", "ours (vLLM)"),
                                          ("hf", "ours (HF)")]):
            values = [(statistics.median(run["tokens_per_s"][key]) if key != "hf" else run.get("hf_tokens_per_s", 0))
                      / 1e3 for run in rollout]
            ax.bar([j + (i - 1) * width for j in range(len(names))], values, width, label=label)
        ax.set_xticks(range(len(names)), names)
        ax.set_ylabel("thousand tokens/s")
        ax.set_title("Rollout throughput, one GPU")
        ax.legend()
        fig.tight_layout()
        fig.savefig(directory / "rollout.png", dpi=120)
        written.append("rollout.png")
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default="results/perf")
    args = parser.parse_args()
    directory = Path(args.dir)
    train, rollout = load(directory, "train_*.json"), load(directory, "rollout_*.json")
    from perf_e2e_report import e2e_section, write_e2e_plot

    e2e_lines = e2e_section(directory)
    plots = write_plots(directory, train, rollout) + write_e2e_plot(directory)
    lines = ["# Performance on one GPU", "", "Generated by `python bench/perf_report.py` from the json files beside it; "
             "do not edit by hand. How to rerun each number: see the end of this page.", ""]
    lines += train_section(train) + rollout_section(rollout) + e2e_lines
    lines += ["## Plots", ""] + [f"![{p}]({p})" for p in plots] + [""]
    lines += (Path(__file__).parent / "perf_rerun.md").read_text().splitlines()
    (directory / "README.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {directory / 'README.md'} and {', '.join(plots) or 'no plots'}")


if __name__ == "__main__":
    main()
