"""The plan of each `run_qwen3_8b.sh` on 8 GPUs (and on 2), without a GPU: the script's own dry run at the
settings bench/scale_suite.sh runs, and the per-GPU memory arithmetic behind it, phase by phase.

    python bench/scale_plan.py [--gpus 2] [--full-gpus 8] [--recipes dapo grpo] [--controllers torchrun ray]

`--gpus`: the suite's default settings (the script's batch cut to PROMPTS_PER_GPU prompts per GPU);
`--full-gpus`: the script's own settings (`bash bench/scale_suite.sh --full`, e.g. DAPO's 512 prompt
groups × 16). Weights are random from bench/configs/qwen3-8b, so nothing is downloaded but GSM8K (made
by `recipezoo data gsm8k` when DATA holds no parquet). The memory is `per_gpu_memory` in
core/trainer/memory_estimate.py, for an 80 GB and a 141 GB GPU (H100, H200), against the suite's target
of at most 95% of each GPU; it is arithmetic, not a measurement. Writes
results/scale/plan_<recipe>_qwen3-8b_<N>gpu_<controller>.json; then `python bench/scale_report.py`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scale_suite import ROOT, ensure_data, model_dir, run_overrides, script_plan  # noqa: E402 (puts the repo root on sys.path)

from core.tracking.mlflow_tracker import git_commit  # noqa: E402

DEVICES = {"H100 80GB": 80e9, "H200 141GB": 141e9}  # bytes; GB = 10^9 bytes, the unit of the GPUs' names
PEAK_LIMIT = 0.95  # the suite's target: no GPU above 95% of its memory
GB = 1e9


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipes", nargs="+", default=["dapo", "grpo"])
    parser.add_argument("--controllers", nargs="+", default=["torchrun", "ray"], choices=["torchrun", "ray"])
    parser.add_argument("--gpus", type=int, nargs="*", default=[2], help="GPU counts at the suite's cut batch")
    parser.add_argument("--full-gpus", type=int, nargs="*", default=[8], help="GPU counts at the script's own batch")
    parser.add_argument("--config-dir", default=str(ROOT / "bench/configs/qwen3-8b"))
    parser.add_argument("--data", default=os.environ.get("DATA", str(Path.home() / "data/gsm8k")),
                        help="dir with GSM8K train/test.parquet (made by `recipezoo data gsm8k` when missing)")
    parser.add_argument("--work", default="/tmp/recipezoo-scale", help="model dir and the dry runs' json")
    parser.add_argument("--out", default=str(ROOT / "results/scale"))
    return parser.parse_args(argv)


def memory_by_device(config, model: Path, world: int) -> dict[str, dict]:
    """`per_gpu_memory` for each of DEVICES, in GB, with the peak's share of the device."""
    from core.trainer.memory_estimate import ModelShape, count_adapter_parameters, count_parameters, per_gpu_memory

    shape = ModelShape.from_pretrained(str(model), config.model.trust_remote_code)
    params = count_parameters(str(model), config.model.trust_remote_code)
    options = dict(with_reference=bool(config.actor.use_kl_loss or config.algorithm.use_kl_in_reward),
                   with_critic=config.algorithm.adv_estimator == "gae",
                   adapter_params=count_adapter_parameters(config, str(model)))
    out = {}
    for device, capacity in DEVICES.items():
        found = per_gpu_memory(config, shape, params, world, capacity, **options)
        resident = found["generation_peak"] - found["rollout"]["share"]
        out[device] = {
            "capacity_gb": capacity / GB,
            **{f"{part}_gb": _gb(found[part]) for part in ("state", "gathered", "activations")},
            "rollout_gb": _gb({k: v for k, v in found["rollout"].items() if k != "kv_tokens_per_engine"}),
            "kv_tokens_per_engine": round(found["rollout"]["kv_tokens_per_engine"]),
            **{f"{phase}_gb": round(found[phase] / GB, 2) for phase in ("generation_peak", "training_peak", "peak")},
            "peak_fraction": round(found["peak"] / capacity, 4),
            "fits": found["peak"] <= PEAK_LIMIT * capacity,
            # The largest engine share that keeps the generation phase within the limit, by this arithmetic.
            "max_gpu_memory_utilization": round(max(PEAK_LIMIT - resident / capacity, 0.0), 3),
        }
    return out


def _gb(parts: dict[str, float]) -> dict[str, float]:
    return {key: round(value / GB, 2) for key, value in parts.items()}


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
            phase = "generation" if found["generation_peak_gb"] >= found["training_peak_gb"] else "training"
            lines.append(f"{device}: does not fit: the {phase} phase needs {found['peak_gb']:.1f} GB per GPU, "
                         f"{found['peak_fraction']:.0%} of {found['capacity_gb']:.0f} GB (target ≤ {PEAK_LIMIT:.0%})")
        rollout = found["rollout_gb"]
        if rollout["kv_cache"] <= 0:
            lines.append(f"{device}: the engine's share ({rollout['share']:.1f} GB) does not hold its bf16 weights "
                         f"({rollout['weights']:.1f} GB): raise rollout.gpu_memory_utilization")
            continue
        held, share = found["kv_tokens_per_engine"] / full_length, config.rollout.gpu_memory_utilization
        if held < per_engine:  # the engine decodes the round in waves: more KV cache, larger decode batches
            room = found["max_gpu_memory_utilization"]
            lines.append(f"{device}: the KV cache holds {found['kv_tokens_per_engine'] / 1e3:.0f}k tokens, {held:.0f} "
                         f"sequences at full length ({full_length} tokens), of the {per_engine} each engine generates "
                         f"per round" + (f"; rollout.gpu_memory_utilization={share} could rise to {room:.2f} within "
                                         f"the {PEAK_LIMIT:.0%} target" if room > share else ""))
    return lines


def plan_one(args, recipe: str, controller: str, gpus: int, full: bool, model: Path, data: Path) -> dict:
    from omegaconf import OmegaConf

    name = f"plan_{recipe}_{model.name.removeprefix('model-')}_{gpus}gpu_{controller}"
    work = Path(args.work)
    overrides = run_overrides(recipe, controller, gpus, 3, model, work / "mlruns", name, full)
    command, text, planned = script_plan(recipe, gpus, overrides, data, work / f"{name}.json")
    config = OmegaConf.create(planned["config"])
    memory = memory_by_device(config, model, planned["plan"]["resources"]["world_size"])
    return {"name": name, "recipe": recipe, "gpus": gpus, "controller": controller,
            "settings": "script" if full else "scaled", "commit": git_commit(ROOT),
            # Run from the repository root, as the script itself is: paths inside it shown relative to it.
            "command": f"NGPUS={gpus} DATA={data} " + " ".join(command).replace(f"{ROOT}/", ""),
            "plan": {key: planned["plan"][key] for key in ("resources", "rollout", "batch", "lengths", "memory", "notes")},
            "memory_per_gpu": memory, "findings": findings(config, planned["plan"], memory), "plan_text": text}


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
                peaks = ", ".join(f"{d} {m['peak_gb']:.1f} GB ({m['peak_fraction']:.0%})"
                                  for d, m in result["memory_per_gpu"].items())
                print(f"[plan] {result['name']}: peak per GPU {peaks}; {len(result['findings'])} finding(s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
