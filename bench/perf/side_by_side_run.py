"""Run ours, verl and TRL one after another at one shape (bench/perf/side_by_side.py), each in its own Python
environment, and write one json per framework in one schema, rewritten after every step the framework logs.

    python -m bench.perf.side_by_side_run --shape 4b --model-dir DIR --data train.parquet --steps 4 \
        --ours-python PY --verl-python PY --trl-python PY --out results/perf --work /tmp/side_by_side

Writes OUT/sbs_<shape>_<framework>.json: the shape's work, the framework's command and settings, each step's
seconds by stage (generation, reward, old/ref log-probs, update, weight sync, the whole step), tokens per second
per GPU, the engine/trainer log-prob drift, and the GPU's peak memory in use while it ran (nvidia-smi, the same
monitor for all three). A framework that fails, or stops at its time limit, keeps the steps it logged and records
its exit and the end of its log (`error`). Random-init weights: the numbers are speed and memory only.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

from bench.common.gpu_memory import PeakMemoryMonitor, device_name, log_tail, stop_process_tree
from bench.perf.side_by_side import (
    FRAMEWORKS,
    SHAPES,
    ours_command,
    plan_checkpoint_layers,
    trl_command,
    verl_command,
)

STAGES = ("gen", "reward", "old_log_prob", "update_actor", "sync_weights")
POLL_S = 10
# Each framework's own name for a stage (verl's weight push into vLLM is `update_weights`; its reference
# forward `ref` is counted with the old-policy one: both are forwards before the update).
VERL_STAGES = {"gen": ("gen",), "reward": ("reward",), "old_log_prob": ("old_log_prob", "ref"),
               "update_actor": ("update_actor",), "sync_weights": ("update_weights", "sync_weights")}


def ours_steps(report: dict) -> list[dict]:
    """bench/common/grpo_vllm_gpu.py's grpo.json steps in the side by side's schema."""
    return [{"step": s["step"], "step_s": s["timing_s/step"],
             "stages_s": {stage: s.get(f"timing_s/{stage}", 0.0) for stage in STAGES},
             "tokens_per_s_per_gpu": s.get("perf/throughput"),
             "logprob_diff": _pair(s, "rollout/logprob_diff/mean", "rollout/logprob_diff/max")}
            for s in report.get("steps", [])]


def verl_steps(report: dict) -> list[dict]:
    """bench/verl/grpo_gpu.py's verl.json steps. verl's drift gauge is in probability space (|Δp|, its
    training/rollout_probs_diff_*), kept as `prob_diff`, not as |Δ log p|."""
    return [{"step": s["step"], "step_s": s["timing_s/step"],
             "stages_s": {stage: sum(s.get(f"timing_s/{name}", 0.0) for name in names)
                          for stage, names in VERL_STAGES.items()},
             "tokens_per_s_per_gpu": s.get("perf/throughput"),
             "prob_diff": _pair(s, "training/rollout_probs_diff_mean", "training/rollout_probs_diff_max")}
            for s in report.get("steps", [])]


def trl_steps(report: dict) -> list[dict]:
    """bench/perf/trl_grpo_gpu.py's steps: TRL's profiled phases as our stages (its no-grad log-prob forward is
    the rest of `_prepare_inputs`), tokens over the step's seconds."""
    steps = []
    for s in report.get("steps", []):
        breakdown = s["breakdown_s"]
        stages = {"gen": breakdown["gen"], "reward": breakdown["reward"],
                  "old_log_prob": breakdown["old_log_prob_and_rest"], "update_actor": breakdown["update_actor"],
                  "sync_weights": breakdown["sync_weights"]}
        steps.append({"step": s["step"], "step_s": s["step_s"], "stages_s": stages,
                      "tokens_per_s_per_gpu": s["tokens"] / s["step_s"],
                      "logprob_diff": _pair(s, "sampling/sampling_logp_difference/mean",
                                            "sampling/sampling_logp_difference/max")})
    return steps


def _pair(step: dict, mean: str, largest: str) -> dict | None:
    return {"mean": step[mean], "max": step[largest]} if mean in step and largest in step else None


# framework -> (its own json under its out dir, the reader of its steps)
OWN_JSON = {"ours": ("grpo.json", ours_steps), "verl": ("verl.json", verl_steps), "trl": ("trl_grpo.json", trl_steps)}


def framework_settings(framework: str, report: dict) -> dict:
    """The settings the report shows beside each column, from what the framework's own json recorded."""
    if framework == "verl":
        config = report.get("config") or {}
        model = config.get("actor_rollout_ref", {}).get("model", {})
        return {"use_remove_padding": model.get("use_remove_padding"),
                "enable_gradient_checkpointing": model.get("enable_gradient_checkpointing")}
    if framework == "trl":
        settings = report.get("settings") or {}
        return {key: settings.get(key) for key in ("liger_kernel", "gradient_checkpointing", "micro_batch")}
    return {}


def column(framework: str, shape_name: str, command: list[str], own: dict, settings: dict, extra: dict) -> dict:
    """One (framework, shape) json: the shape's work, the command, the framework's steps in one schema."""
    return {"framework": framework, "shape": shape_name, "title": SHAPES[shape_name].title, "random_init": True,
            "work": asdict(SHAPES[shape_name]), "command": shlex.join(command), "device": own.get("device"),
            "versions": own.get("versions") or {}, "settings": framework_settings(framework, own) | settings,
            "steps": OWN_JSON[framework][1](own), **extra}


def read_own(path: Path) -> dict:
    """The framework's json as it last wrote it ({} before its first step, or mid-write)."""
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def run_column(framework: str, shape_name: str, command: list[str], work: Path, out: Path, timeout_s: float,
               settings: dict) -> dict:
    """`command` under the memory monitor, its json rewritten into OUT after every step it logs; at the time
    limit its whole process tree is stopped and its steps kept."""
    own_path, log = work / OWN_JSON[framework][0], work / f"{framework}.log"
    own_path.unlink(missing_ok=True)  # an earlier call's steps are not this run's
    target = out / f"sbs_{shape_name}_{framework}.json"
    start, returncode, seen = time.time(), None, -1

    def write(extra: dict) -> dict:
        result = column(framework, shape_name, command, read_own(own_path), settings,
                        {"wall_s": time.time() - start, "peak_memory_gib": max(memory.peaks_gib(), default=None),
                         **extra})
        target.write_text(json.dumps(result, indent=1) + "\n")
        return result

    print(f"== {framework} {shape_name}: {shlex.join(command)} (log {log})", flush=True)
    with PeakMemoryMonitor() as memory, open(log, "w") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
        while returncode is None:
            try:
                returncode = process.wait(timeout=POLL_S)
            except subprocess.TimeoutExpired:
                if timeout_s and time.time() - start > timeout_s:
                    returncode = f"stopped at its {timeout_s:.0f} s limit (exit {stop_process_tree(process, 0)})"
            steps = len(OWN_JSON[framework][1](read_own(own_path)))
            if steps != seen:
                seen = steps
                write({"returncode": None})
    final = {"returncode": returncode}
    if returncode != 0:
        final["error"] = log_tail(log, 40)
    result = write(final)
    times = ", ".join(f"{s['step_s']:.2f}" for s in result["steps"]) or "none"
    print(f"{framework} {shape_name}: exit {returncode}, step times {times} s, peak "
          f"{result['peak_memory_gib']} GiB; wrote {target}", flush=True)
    return result


def commands(args, work: Path) -> dict[str, tuple[list[str], dict]]:
    """Each framework's command at the shape, and the settings the side by side chose for it."""
    shape = SHAPES[args.shape]
    layers = plan_checkpoint_layers(shape) if args.checkpoint_layers is None else args.checkpoint_layers
    common = dict(model_dir=str(Path(args.model_dir).resolve()), data=str(Path(args.data).resolve()),
                  steps=args.steps)
    return {
        "ours": (ours_command(shape, args.ours_python, out=work / "ours", checkpoint_layers=layers, **common),
                 {"checkpoint_layers": layers}),
        "verl": (verl_command(shape, args.verl_python, out=work / "verl", timeout_s=args.timeout_s, **common), {}),
        "trl": (trl_command(shape, args.trl_python, out=work / "trl", **common), {}),
    }


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), required=True)
    parser.add_argument("--frameworks", nargs="+", choices=FRAMEWORKS, default=list(FRAMEWORKS))
    parser.add_argument("--model-dir", required=True, help="random-init HF dir of the shape's config")
    parser.add_argument("--data", required=True, help="GSM8K prompts in verl's parquet schema")
    parser.add_argument("--steps", type=int, default=4, help="at least 2: the report compares the steps after the first")
    parser.add_argument("--timeout-s", type=int, default=0, help="stop each framework after this long; 0: no limit")
    parser.add_argument("--checkpoint-layers", type=int, help="ours' actor.checkpoint_layers (default: the plan's)")
    for framework in FRAMEWORKS:
        parser.add_argument(f"--{framework}-python", default=sys.executable, help=f"{framework}'s environment")
    parser.add_argument("--out", default="results/perf")
    parser.add_argument("--work", default="/tmp/side_by_side")
    args = parser.parse_args(argv)
    if args.steps < 2:
        parser.error(f"--steps {args.steps}: at least 2, so that a step follows the first (warm-up) one")
    if not Path(args.model_dir, "config.json").is_file():
        parser.error(f"--model-dir {args.model_dir}: no config.json there (bench/common/random_model.py makes one)")
    if not Path(args.data).is_file():
        parser.error(f"--data {args.data}: no such file (recipezoo data gsm8k makes it)")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    work, out = Path(args.work).resolve() / args.shape, Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    planned = commands(args, work)
    print(f"side by side at {SHAPES[args.shape].title} on {device_name()}", flush=True)
    failed = 0
    for framework in args.frameworks:
        command, settings = planned[framework]
        (work / framework).mkdir(parents=True, exist_ok=True)
        result = run_column(framework, args.shape, command, work / framework, out, args.timeout_s, settings)
        failed += "error" in result
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
