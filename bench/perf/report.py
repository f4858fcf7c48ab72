"""results/perf/README.md and its plots from the json files the bench/perf_*_suite.sh runs wrote into results/perf/.

    python -m bench.perf.report [--dir results/perf]

Nothing here is measured or typed by hand: every number comes from a json file that a bench
script wrote on the GPU, and each table names that script's command.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from bench.common.results_page import load_results, pyplot, save_plot, table_header, target_verdict, write_page

TARGETS = {"rollout": 0.95, "mfu": 0.40}  # the end-to-end speed-up's: perf_e2e_report.SPEEDUP_TARGET


def model_label(run: dict) -> str:
    return run["model"].removeprefix("train_")


def variant_label(v: dict) -> str:
    return v["variant"] + (f" @{v['micro_batch_tokens']} tok" if v.get("micro_batch_tokens") else "")


def train_section(runs: list[dict]) -> list[str]:
    if not runs:
        return []
    lines = ["## Policy update: tokens/s and MFU", "",
             "One optimizer step over an RL-shaped batch (prompts 64–256 tokens, responses 32–1024, GRPO's "
             "clipped loss). MFU counts useful FLOPs only, over 989 TFLOP/s (dense bf16); see "
             "`bench/perf/train_mfu_gpu.py`. `ours_compiled` is the default on CUDA (`actor.compile_layers=auto`); "
             "`ours` is the same without torch.compile, `naive` plain HF code (padded micro-batches of 16 rows, "
             "gradient checkpointing, fp32 full-vocab log-softmax).", "",
             *table_header("model", "variant", "tokens/s", "MFU", "step (s)", "peak memory (GiB)", "target MFU")]
    for run in runs:
        for v in run["variants"]:
            if "error" in v:
                lines.append(f"| {model_label(run)} | {variant_label(v)} | {v['error'].split('. ')[0]} | | | | |")
                continue
            target = ""
            if v["variant"] == "ours_compiled" and "1.7b" in run["model"]:  # the default path on CUDA
                target = f"≥ {TARGETS['mfu']:.0%}: {target_verdict(v['mfu'], TARGETS['mfu'])}"
            lines.append(f"| {model_label(run)} | {variant_label(v)} | {v['tokens_per_s']:,.0f} | {v['mfu']:.1%} | "
                         f"{v['median_step_s']:.2f} | {v['peak_memory_gib']:.1f} | {target} |")
    lines += [""] + [f"- `{model_label(run)}`: {run['tokens']:,} real tokens in {run['rows']} rows "
                     f"({run['padded_tokens']:,} padded), {run['device']}, torch {run['torch']}; "
                     f"`{run['command']}`" for run in runs]
    # These files' packed_vs_padded field was measured with a bench bug (the padded model shared the packed
    # one's config, so it ran without its padding mask); tests/test_packing_gpu.py is the GPU check now.
    lines += ["", "GPU correctness of the fast path is `tests/test_packing_gpu.py` (packed varlen vs padded SDPA "
              "log-probs, and a compiled packed update vs an eager padded one), which passes on the H100; the "
              "`packed_vs_padded_max_abs_logprob_diff` field in these json files is void (the bench's padded model "
              "shared the packed one's config and ran without its padding mask; fixed since).", ""]
    return lines


def backend_overhead(run: dict) -> tuple[float, float] | None:
    """Median seconds per call that our backend spends outside `engine.generate`, and that as a share of
    its call: the part of ours/raw that is our code, not run-to-run noise of the engine. Engine calls are
    [warm-up raw, warm-up ours, then raw, ours for each round]; every round generates prompts × new_tokens
    tokens (random weights sample EOS about once in 150k tokens)."""
    calls = run.get("engine_generate_s")
    if not calls:
        return None
    tokens = run["prompts"] * run["new_tokens"]
    ours = run["tokens_per_s"]["recipezoo VLLMRollout"]
    totals = [tokens / tps for tps in ours]
    extra = [total - calls[3 + 2 * i] for i, total in enumerate(totals)]
    return statistics.median(extra), statistics.median(e / t for e, t in zip(extra, totals))


def rollout_section(runs: list[dict]) -> list[str]:
    if not runs:
        return []
    lines = ["## Rollout: our vLLM backend vs raw vLLM vs our HF backend; weight sync", "",
             *table_header("model", "raw vLLM tok/s", "ours (vLLM) tok/s", "ours / raw", "our code per call",
                           "ours (HF) tok/s", "engine start (s)", "weight sync FSDP2→vLLM", "sleep frees")]
    for run in runs:
        med = {k: statistics.median(v) for k, v in run["tokens_per_s"].items()}
        ratio = run["ours_over_raw"]
        verdict = target_verdict(ratio, TARGETS["rollout"])
        hf = f"{run['hf_tokens_per_s']:,.0f}" if "hf_tokens_per_s" in run else "not run"
        sync = run.get("weight_sync")
        sync_text = f"{sync['gb_per_s']:.1f} GB/s ({sync['bytes'] / 1e9:.2f} GB in {min(sync['seconds']):.2f} s)" \
            if sync else "not run"
        overhead = backend_overhead(run)
        own = f"{overhead[0]:.2f} s ({overhead[1]:.1%})" if overhead else "not measured"
        lines.append(f"| {run['model']} | {med['raw vllm.LLM.generate']:,.0f} | {med['recipezoo VLLMRollout']:,.0f} | "
                     f"**{ratio:.1%}** ({verdict}) | {own} | {hf} | {run['engine_start_s']:.0f} | {sync_text} | "
                     f"{run['sleep']['freed_gib']:.1f} GiB |")
    first = runs[0]
    lines += ["", f"{first['prompts']} prompts × {first['prompt_len']} tokens → {first['new_tokens']} new tokens, "
              f"{first['sampling']}; vLLM {first['vllm']} with CUDA graphs, dummy weights; {first['device']}. "
              "Ours/raw is the ratio of medians over alternating rounds on one engine (target ≥ 95%). "
              "\"Our code per call\" is the time our backend spends outside `engine.generate` (unpadding prompts, "
              "building the padded response and log-prob tensors, the batch check): the part of the gap that is "
              "ours; the rest is the engine's own round-to-round spread, visible in the rounds below.", ""]
    for run in runs:
        rounds = "; ".join(f"{name}: {', '.join(f'{v:,.0f}' for v in values)}"
                           for name, values in run["tokens_per_s"].items())
        lines.append(f"- `{run['model']}` rounds (tok/s, in order): {rounds}")
    lines.append("")
    lines += [f"- `{run['command']}`" for run in runs]
    return lines + [""]


def write_plots(directory: Path, train: list[dict], rollout: list[dict]) -> list[str]:
    written = []
    if train:
        fig, ax = pyplot().subplots(figsize=(7, 3.8))
        labels, values = [], []
        for run in train:
            for v in run["variants"]:
                if "mfu" in v:
                    labels.append(f"{model_label(run)}  {variant_label(v)}")
                    values.append(100 * v["mfu"])
        ax.barh(labels, values, color=["tab:blue" if "ours" in lab else "tab:gray" for lab in labels])
        ax.invert_yaxis()
        ax.axvline(100 * TARGETS["mfu"], color="tab:red", linestyle="--", label="target (1.7B)")
        ax.set_xlabel("MFU (%)")
        ax.set_title("Policy update MFU, one GPU")
        ax.legend()
        written.append(save_plot(fig, directory / "train_mfu.png"))
    if rollout:
        fig, ax = pyplot().subplots(figsize=(6, 3.5))
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
        ax.set_ylim(top=ax.get_ylim()[1] * 1.2)  # room for the legend above the bars
        ax.legend(ncol=3, loc="upper center")
        written.append(save_plot(fig, directory / "rollout.png"))
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default="results/perf")
    args = parser.parse_args()
    directory = Path(args.dir)
    train, rollout = load_results(directory.glob("train_*.json")), load_results(directory.glob("rollout_*.json"))
    from bench.perf.e2e_report import e2e_section, write_e2e_plot
    from bench.perf.sglang_report import sglang_section, write_sglang_plot
    from bench.perf.side_by_side_report import side_by_side_section, write_side_by_side_plot
    from bench.verl.report import verl_section, write_verl_plot

    e2e_lines = e2e_section(directory) + verl_section(directory)
    plots = (write_plots(directory, train, rollout) + write_sglang_plot(directory) + write_e2e_plot(directory)
             + write_verl_plot(directory))
    lead = write_side_by_side_plot(directory)  # the page leads with it: step time by stage, three frameworks
    lines = ["# Performance on one GPU", "", "Generated by `python -m bench.perf.report` from the json files beside it; "
             "do not edit by hand. How to rerun each number: see the end of this page.", ""]
    lines += side_by_side_section(directory) + train_section(train) + rollout_section(rollout)
    lines += sglang_section(directory) + e2e_lines
    lines += ["## Plots", ""] + [f"![{p}]({p})" for p in plots] + [""]
    lines += (Path(__file__).parent / "rerun.md").read_text().splitlines()
    print(f"wrote {write_page(directory / 'README.md', lines)} and {', '.join(lead + plots) or 'no plots'}")


if __name__ == "__main__":
    main()
