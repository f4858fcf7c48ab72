"""The plan of each `run_qwen3_8b.sh` on 8 GPUs (and on 2 and 4), without a GPU: the script's own dry run at the
settings bench/scale/suite.sh runs, and the per-GPU memory arithmetic behind it, phase by phase.

    python -m bench.scale.plan [--gpus 2 4] [--full-gpus 8] [--recipes dapo grpo rloo remax ppo] [--controllers torchrun ray]
        [--tag expandable actor.expandable_segments=true]   # the plan of a suite run made with these overrides

`--gpus`: the suite's default settings (the script's batch cut to PROMPTS_PER_GPU prompts per GPU);
`--full-gpus`: the script's own settings (`bash bench/scale/suite.sh --full`, e.g. DAPO's 512 prompt
groups × 16). Weights are random from bench/configs/qwen3-8b, so nothing is downloaded but GSM8K (made
by `recipezoo data gsm8k` when DATA holds no parquet). The memory is `per_gpu_memory` in
core/trainer/memory_estimate.py, in GiB as nvidia-smi counts it, for an H100 80GB and an H200 141GB with
prompts of the training data's mean length, against the suite's target of at most 95% of each GPU; it is
arithmetic with two terms fit on measured runs, not a measurement. Writes
results/scale/plan_<recipe>_qwen3-8b_<N>gpu_<controller>[_<tag>].json; then `python -m bench.scale.report`, which
sets each measured run beside the plan of the same settings.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from pathlib import Path

from bench.scale.suite import (
    ROOT,
    ensure_data,
    model_dir,
    run_name,
    run_overrides,
    script_plan,
    settings_label,
    suite_settings,
)
from core.tracking.mlflow_tracker import git_commit
from core.trainer.memory_estimate import (
    GIB,
    PEAK_TARGET,
    ModelShape,
    count_adapter_parameters,
    count_parameters,
    engine_share_within,
    expandable_segments_lever,
    micro_batch_tokens_within,
    per_gpu_memory,
    planned_roles,
)

# GiB as nvidia-smi's memory.total gives them, the measured peaks' denominator (vLLM's share is of CUDA's
# total, 0.4% less on an H200: 0.2 GiB at a share of 0.35).
DEVICES = {"H100 80GB": 79.6, "H200 141GB": 140.4}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipes", nargs="+", default=["dapo", "grpo", "rloo", "remax", "ppo"])
    parser.add_argument("--controllers", nargs="+", default=["torchrun", "ray"], choices=["torchrun", "ray"])
    parser.add_argument("--gpus", type=int, nargs="*", default=[2, 4], help="GPU counts at the suite's cut batch")
    parser.add_argument("--full-gpus", type=int, nargs="*", default=[8], help="GPU counts at the script's own batch")
    parser.add_argument("--config-dir", default=str(ROOT / "bench/configs/qwen3-8b"))
    parser.add_argument("--data", default=os.environ.get("DATA", str(Path.home() / "data/gsm8k")),
                        help="dir with GSM8K train/test.parquet (made by `recipezoo data gsm8k` when missing)")
    parser.add_argument("--work", default="/tmp/recipezoo-scale", help="model dir and the dry runs' json")
    parser.add_argument("--out", default=str(ROOT / "results/scale"))
    parser.add_argument("--tag", default="", help="suffix of each plan's name, as bench/scale/suite.sh --tag names "
                        "the runs made with the same overrides")
    parser.add_argument("--no-expandable-segments", action="store_true",
                        help="as bench/scale/suite.sh's: the plans of runs made without its SUITE_DEFAULTS")
    parser.add_argument("overrides", nargs="*", help="config overrides for every plan, as given to the suite")
    return parser.parse_args(argv)


def memory_by_device(config, model: Path, world: int, prompt_tokens: float) -> dict[str, dict]:
    """`per_gpu_memory` for each of DEVICES, in GiB, with the peak's share of the device and the settings
    that would bring each phase within PEAK_TARGET."""
    shape = ModelShape.from_pretrained(str(model), config.model.trust_remote_code)
    params = count_parameters(str(model), config.model.trust_remote_code)
    options = dict(**planned_roles(config),
                   adapter_params=count_adapter_parameters(config, str(model)), prompt_tokens=prompt_tokens)
    out = {}
    for device, capacity in DEVICES.items():
        found = per_gpu_memory(config, shape, params, world, capacity * GIB, **options)
        out[device] = {
            "capacity_gib": capacity, "micro_batch_tokens": found["micro_batch_tokens"],
            **{f"{part}_gib": _gib(found[part]) for part in ("state", "gathered", "activations")},
            "rollout_gib": _gib({k: v for k, v in found["rollout"].items() if k != "kv_tokens_per_engine"}),
            "kv_tokens_per_engine": round(found["rollout"]["kv_tokens_per_engine"]),
            **{f"{key}_gib": round(found[key] / GIB, 2) for key in (
                "runtime", "allocator_cache", "generation_peak", "training_allocated", "training_peak", "peak")},
            "peak_fraction": round(found["peak"] / (capacity * GIB), 4),
            "fits": found["peak"] <= PEAK_TARGET * capacity * GIB,
            # The largest engine share and micro-batch token budget that keep each phase within the limit.
            "max_gpu_memory_utilization": round(engine_share_within(config, found, PEAK_TARGET * capacity * GIB), 3),
            "max_micro_batch_tokens": micro_batch_tokens_within(found, PEAK_TARGET * capacity * GIB, cached=True),
            "expandable_segments_lever": expandable_segments_lever(config, found, PEAK_TARGET * capacity * GIB),
        }
    return out


def _gib(parts: dict[str, float]) -> dict[str, float]:
    return {key: round(value / GIB, 2) for key, value in parts.items()}


@functools.cache
def mean_prompt_tokens(model: Path, data: Path, max_prompt_length: int, truncation: str) -> float:
    """The training prompts' mean length in tokens, chat-templated as the trainer builds them: a micro-batch
    of many rows holds about the mean, far from data.max_prompt_length (GSM8K: 83 tokens of 512)."""
    from transformers import AutoTokenizer

    from core.data.dataset import PromptDataset

    tokenizer = AutoTokenizer.from_pretrained(str(model))
    prompts = PromptDataset(data / "train.parquet", tokenizer, max_prompt_length=max_prompt_length,
                            truncation=truncation)
    return sum(len(item.prompt_ids) for item in prompts.items) / len(prompts)


def findings(config, plan: dict, memory: dict[str, dict]) -> list[str]:
    """What the arithmetic says would not fit or would leave the GPUs idle, one line each."""
    batch, lines = plan["batch"], []
    per_gpu, micro = batch["sequences_per_mini_batch_per_device"], config.actor.micro_batch_size
    if not config.actor.micro_batch_tokens and per_gpu % micro:
        lines.append(f"actor.micro_batch_size={micro} does not divide the {per_gpu} sequences each GPU takes per "
                     f"mini-batch: {per_gpu // micro} micro-batches of {micro} and one of {per_gpu % micro}")
    engines = plan["resources"]["world_size"] // config.rollout.tensor_model_parallel_size
    per_engine = batch["sequences_per_step"] // engines
    full_length = config.data.max_prompt_length + config.data.max_response_length
    for device, found in memory.items():
        if not found["fits"]:
            lines.append(f"{device}: {over_target(found)}")
        rollout = found["rollout_gib"]
        if rollout["kv_cache"] <= 0:
            lines.append(f"{device}: the engine's share ({rollout['share']:.1f} GiB) does not hold its bf16 weights "
                         f"({rollout['weights']:.1f} GiB): raise rollout.gpu_memory_utilization")
            continue
        held, share = found["kv_tokens_per_engine"] / full_length, config.rollout.gpu_memory_utilization
        if held < per_engine:  # the engine decodes the round in waves: more KV cache, larger decode batches
            room = found["max_gpu_memory_utilization"]
            lines.append(f"{device}: the KV cache holds {found['kv_tokens_per_engine'] / 1e3:.0f}k tokens, {held:.0f} "
                         f"sequences at full length ({full_length} tokens), of the {per_engine} each engine generates "
                         f"per round" + (f"; rollout.gpu_memory_utilization={share} could rise to {room:.2f} within "
                                         f"the {PEAK_TARGET:.0%} target" if round(room, 2) > share else ""))
    return lines


def over_target(found: dict) -> str:
    """Which phase goes over PEAK_TARGET, by how much, and the setting that would bring it within."""
    generation = found["generation_peak_gib"] >= found["training_peak_gib"]
    if generation:
        share = found["max_gpu_memory_utilization"]
        lever = f"rollout.gpu_memory_utilization={share:.2f}" if share else "more GPUs or actor.cpu_offload=true"
    else:
        budget = found["max_micro_batch_tokens"]
        lever = (f"actor.micro_batch_tokens={budget} (now {found['micro_batch_tokens']} tokens a micro-batch)"
                 if budget else "more GPUs or actor.cpu_offload=true")
        if found["expandable_segments_lever"]:
            lever = f"{found['expandable_segments_lever']} or {lever}"
    return (f"over the target: the {'generation' if generation else 'training'} phase needs "
            f"{found['peak_gib']:.1f} GiB per GPU, {found['peak_fraction']:.0%} of {found['capacity_gib']:.1f} GiB "
            f"(target ≤ {PEAK_TARGET:.0%}); within it with {lever}")


def plan_one(args, recipe: str, controller: str, gpus: int, full: bool, model: Path, data: Path) -> dict:
    from omegaconf import OmegaConf

    tag, given = suite_settings(args.tag, args.overrides, full, not args.no_expandable_segments)
    name = "plan_" + run_name(recipe, model, gpus, controller, tag)
    work = Path(args.work)
    overrides = [*run_overrides(recipe, controller, gpus, 3, model, work / "mlruns", name, full), *given]
    command, text, planned = script_plan(recipe, gpus, overrides, data, work / f"{name}.json")
    config = OmegaConf.create(planned["config"])
    prompt_tokens = mean_prompt_tokens(model, data, config.data.max_prompt_length, config.data.truncation)
    memory = memory_by_device(config, model, planned["plan"]["resources"]["world_size"], prompt_tokens)
    return {"name": name, "recipe": recipe, "gpus": gpus, "controller": controller,
            "settings": settings_label(full, given), "commit": git_commit(ROOT),
            # Run from the repository root, as the script itself is: paths inside it shown relative to it.
            "command": f"NGPUS={gpus} DATA={data} " + " ".join(command).replace(f"{ROOT}/", ""),
            "plan": {key: planned["plan"][key] for key in ("resources", "rollout", "batch", "lengths", "memory", "notes")},
            "mean_prompt_tokens": round(prompt_tokens, 1), "memory_per_gpu": memory,
            "findings": findings(config, planned["plan"], memory), "plan_text": text}


def main(argv=None) -> int:
    args = parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model, data = model_dir(Path(args.config_dir), Path(args.work)), ensure_data(Path(args.data))
    runs = [(gpus, False) for gpus in args.gpus] + [(gpus, True) for gpus in args.full_gpus]
    for recipe in args.recipes:
        for gpus, full in runs:
            for controller in args.controllers:
                result = plan_one(args, recipe, controller, gpus, full, model, data)
                (out / f"{result['name']}.json").write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
                peaks = ", ".join(f"{d} {m['peak_gib']:.1f} GiB ({m['peak_fraction']:.0%})"
                                  for d, m in result["memory_per_gpu"].items())
                print(f"[plan] {result['name']}: peak per GPU {peaks}; {len(result['findings'])} finding(s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
