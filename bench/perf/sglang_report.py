"""The SGLang section of results/perf/README.md and its plot, from the sglang_rollout_<backend>_<model>.json files
that bench/perf/sglang_suite.sh (bench/perf/sglang_rollout.py) wrote: our SGLang backend against raw `sglang.Engine.generate`
and our vLLM backend against raw vLLM, same prompts, lengths and sampling; weight sync GB/s and memory freed by
sleep for each. A model or backend without a file shows as "not run"; nothing here is typed by hand."""

from __future__ import annotations

import statistics
from pathlib import Path

from bench.common.results_page import load_results, pyplot, save_plot, table_header, target_verdict

TARGET = 0.95  # ours / raw, each engine
BACKENDS = {"sglang": ("raw sglang.Engine.generate", "recipezoo SGLangRollout"),
            "vllm": ("raw vllm.LLM.generate", "recipezoo VLLMRollout")}
PATHS = (("sglang", 0, "raw SGLang"), ("sglang", 1, "ours (SGLang)"), ("vllm", 0, "raw vLLM"), ("vllm", 1, "ours (vLLM)"))


def load_runs(directory: Path) -> dict[str, dict[str, dict]]:
    """model -> backend -> its json, models in the order of their first file."""
    runs: dict[str, dict[str, dict]] = {}
    for run in load_results(directory.glob("sglang_rollout_*.json")):
        runs.setdefault(run["model"], {})[run["backend"]] = run
    return runs


def median_tokens_per_s(run: dict | None, which: int) -> float | None:
    if run is None:
        return None
    return statistics.median(run["tokens_per_s"][BACKENDS[run["backend"]][which]])


def engine_split(run: dict) -> dict[str, tuple[float, float]]:
    """Per path: median seconds inside `engine.generate` and outside it (our backend's own host work: request
    building and the rollout batch), from the engine calls in the order bench/rollout_vllm_gpu.timed_rounds
    made them: one warm-up call per path, then the rounds."""
    from bench.perf.rollout_vllm_gpu import round_order

    names, calls = list(run["tokens_per_s"]), run["engine_generate_s"][len(run["tokens_per_s"]):]
    tokens, inside, outside = run["prompts"] * run["new_tokens"], {n: [] for n in names}, {n: [] for n in names}
    order = [name for index in range(len(run["tokens_per_s"][names[0]])) for name in round_order(names, index)]
    seen = {name: 0 for name in names}
    for name, seconds in zip(order, calls, strict=True):
        inside[name].append(seconds)
        outside[name].append(tokens / run["tokens_per_s"][name][seen[name]] - seconds)
        seen[name] += 1
    return {name: (statistics.median(inside[name]), statistics.median(outside[name])) for name in names}


def _split_line(run: dict) -> str:
    parts = [f"{name}: {inside:.2f} s in the engine call + {outside:.3f} s outside it"
             for name, (inside, outside) in engine_split(run).items()]
    host = run.get("host")
    load = (f"; host load (1 min) {host['load_1min_before']:.0f} → {host['load_1min_after']:.0f} on "
            f"{host['cpus']} CPUs, {host['torch_threads']} torch threads" if host else "")
    return f"- `{run['model']}` {run['backend']}, medians per call: " + "; ".join(parts) + load


def _ratio(run: dict | None) -> str:
    if run is None:
        return "not run"
    ratio = run["ours_over_raw"]
    return f"**{ratio:.1%}** ({target_verdict(ratio, TARGET)})"


def _number(value: float | None) -> str:
    return "not run" if value is None else f"{value:,.0f}"


def _sync(run: dict | None) -> str:
    sync = run and run.get("weight_sync")
    return f"{sync['gb_per_s']:.1f} GB/s ({sync['bytes'] / 1e9:.2f} GB)" if sync else "not run"


def _sleep(run: dict | None) -> str:
    sleep = run and run.get("sleep")
    return f"{sleep['freed_gib']:.1f} GiB" if sleep else "not run"


def sglang_section(directory: Path) -> list[str]:
    runs = load_runs(directory)
    if not runs:
        return []
    lines = ["## Rollout: our SGLang backend vs raw SGLang, beside our vLLM backend vs raw vLLM", "",
             *table_header("model", "raw SGLang tok/s", "ours (SGLang) tok/s", "ours / raw SGLang", "raw vLLM tok/s",
                           "ours (vLLM) tok/s", "ours / raw vLLM", "weight sync FSDP2→SGLang", "FSDP2→vLLM",
                           "sleep frees (SGLang)", "(vLLM)")]
    for model, by_backend in runs.items():
        sg, vl = by_backend.get("sglang"), by_backend.get("vllm")
        lines.append(f"| {model} | {_number(median_tokens_per_s(sg, 0))} | {_number(median_tokens_per_s(sg, 1))} | "
                     f"{_ratio(sg)} | {_number(median_tokens_per_s(vl, 0))} | {_number(median_tokens_per_s(vl, 1))} | "
                     f"{_ratio(vl)} | {_sync(sg)} | {_sync(vl)} | {_sleep(sg)} | {_sleep(vl)} |")
    first = next(iter(next(iter(runs.values())).values()))
    versions = "; ".join(sorted({f"{r['backend']} {r['engine_version']}, torch {r['torch']}, {r['device']}"
                                 for by_backend in runs.values() for r in by_backend.values()}))
    lines += ["", f"{first['prompts']} prompts × {first['prompt_len']} tokens → {first['new_tokens']} new tokens, "
              f"{first['sampling']}; random weights, CUDA graphs on, each engine built by our backend's constructor "
              f"(raw and ours share it; rounds alternate). Ours/raw is the ratio of medians (target ≥ {TARGET:.0%}). "
              f"The two engines ran in separate processes and Python environments: {versions}.", ""]
    for by_backend in runs.values():
        for run in by_backend.values():
            rounds = "; ".join(f"{name}: {', '.join(f'{v:,.0f}' for v in values)}"
                               for name, values in run["tokens_per_s"].items())
            lines.append(f"- `{run['model']}` {run['backend']} rounds (tok/s, in order): {rounds}; engine start "
                         f"{run['engine_start_s']:.0f} s; `{run['command']}`")
    lines += ["", "Where each path's time goes: the engine call itself against the host work around it (ours builds "
              "the requests and the rollout batch; raw only counts tokens). Where ours trails raw, this says whether "
              "the engine or our own code took the time.", ""]
    lines += [_split_line(run) for by_backend in runs.values() for run in by_backend.values()]
    return lines + [""]


def write_sglang_plot(directory: Path) -> list[str]:
    runs = load_runs(directory)
    if not runs:
        return []
    fig, ax = pyplot().subplots(figsize=(7, 3.8))
    names, width = list(runs), 0.2
    for i, (backend, which, label) in enumerate(PATHS):
        values = [(median_tokens_per_s(runs[m].get(backend), which) or 0) / 1e3 for m in names]
        ax.bar([j + (i - 1.5) * width for j in range(len(names))], values, width, label=label)
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel("thousand tokens/s")
    ax.set_title("Rollout throughput, one GPU: SGLang and vLLM, raw and ours")
    ax.set_ylim(top=ax.get_ylim()[1] * 1.25)  # room for the legend above the bars
    ax.legend(ncol=4, loc="upper center", fontsize=8)
    return [save_plot(fig, directory / "sglang_rollout.png")]
