"""Each recipe's `run_qwen3_8b.sh` for a few steps on the GPUs of this node, under torchrun and under Ray.

    bash bench/scale/suite.sh --recipes dapo grpo --controllers torchrun ray --steps 3

Weights are random (`model.init=random`: the architecture from bench/configs/qwen3-8b, vLLM's dummy
weights replaced by the trainer's at start), so nothing is downloaded; speed and memory depend on the
shapes, not on trained weights. The reward is bench/common/varied_reward.py (varies between samples, so
every update changes the weights and DAPO's dynamic sampling keeps its groups). The batch is the
script's, scaled to the GPUs present (`PROMPTS_PER_GPU`), with responses at the script's length; with
`--full` it is the script's own (512 prompt groups × 16 for DAPO: the 8-GPU run). The scaled settings also turn
on expandable segments (SUITE_DEFAULTS; `--no-expandable-segments` leaves them out). Every run's config
goes through the script's own dry run first; `python -m bench.scale.plan` records those plans and their
memory arithmetic without a GPU.

Writes results/scale/<recipe>_qwen3-8b_<N>gpu_<controller>.json: the command, the median step time
after step 1 and its per-stage breakdown, the start before step 1 phase by phase (`start_s`: Ray's cluster,
workers and setup, each worker's model loads, engine start and first weight sync; core/trainer/start_record.py),
generated and trained tokens/s per GPU, each GPU's peak memory (nvidia-smi, every 0.5 s), the policy update's
MFU, and raw vLLM tokens/s at the same batch and lengths measured in the same call (bench/scale/raw_vllm.py).
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

from bench.common.gpu_memory import device_name, run_logged_until
from core.tracking.mlflow_tracker import git_commit
from core.trainer.start_record import PREFIX as START_PREFIX

ROOT = Path(__file__).resolve().parents[2]
# Prompts per GPU per step: the scripts' sequences per GPU cut so that 3 steps take minutes, not hours.
PROMPTS_PER_GPU = {"dapo": 8, "grpo": 32, "rloo": 32, "remax": 32, "ppo": 128}
STAGES = ("gen", "reward", "old_log_prob", "values", "adv", "update_critic", "update_actor", "sync_weights")
PEAK_BF16 = 989e12  # H100/H200 SXM dense bf16, the datasheet's figure
# The scaled settings' allocator: expandable segments (core/engine/allocator.py). Without them GRPO, RLOO and ReMax
# peaked at 95.4-96.6% of an H200 on 2 GPUs, over the 95% the plan promises; with them at 81.6% (results/scale).
SUITE_DEFAULTS = {"actor.expandable_segments": "true"}
DEFAULT_TAG = "expandable"  # the name's suffix of a run at SUITE_DEFAULTS: apart from the runs made before them


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipes", nargs="+", default=["dapo", "grpo", "rloo", "remax", "ppo"])
    parser.add_argument("--controllers", nargs="+", default=["torchrun", "ray"], choices=["torchrun", "ray"])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--gpus", type=int, default=0, help="0: every GPU of this node")
    parser.add_argument("--config-dir", default=str(ROOT / "bench/configs/qwen3-8b"))
    parser.add_argument("--data", default=os.environ.get("DATA", str(Path.home() / "data/gsm8k")),
                        help="dir with GSM8K train/test.parquet (made by `recipezoo data gsm8k` when missing)")
    parser.add_argument("--work", default="/tmp/recipezoo-scale", help="model dir, MLflow store, logs")
    parser.add_argument("--out", default=str(ROOT / "results/scale"))
    parser.add_argument("--timeout-s", type=int, default=1800, help="per run")
    parser.add_argument("--no-raw-vllm", action="store_true", help="skip the raw vLLM reference")
    parser.add_argument("--full", action="store_true",
                        help="the scripts' own batch and engine share (their full settings, e.g. on 8 GPUs) "
                             "instead of PROMPTS_PER_GPU prompts per GPU")
    parser.add_argument("--tag", default="", help="suffix of each run's name and json, for runs with overrides "
                        f"beside those without (default at the scaled settings: {DEFAULT_TAG})")
    parser.add_argument("--no-expandable-segments", action="store_true",
                        help="leave SUITE_DEFAULTS out (the allocator's default; runs named without a tag)")
    parser.add_argument("overrides", nargs="*",
                        help="extra config overrides for every run, e.g. actor.micro_batch_tokens=16384")
    return parser.parse_args(argv)


def model_dir(config_dir: Path, work: Path) -> Path:
    """config.json + tokenizer files in one dir (the tokenizer ships xz-compressed beside the configs)."""
    out = work / f"model-{config_dir.name}"
    out.mkdir(parents=True, exist_ok=True)
    for item in config_dir.iterdir():
        shutil.copy2(item, out / item.name)
    packed = config_dir.parent / "qwen3-tokenizer.json.xz"
    if not (out / "tokenizer.json").exists():
        (out / "tokenizer.json").write_bytes(lzma.decompress(packed.read_bytes()))
    return out


def ensure_data(data: Path) -> Path:
    if not (data / "train.parquet").exists():
        for split in ("train", "test"):
            subprocess.run([sys.executable, "-m", "core.cli", "data", "gsm8k", "--split", split, "--out", str(data)],
                           cwd=ROOT, check=True)
    return data


def run_overrides(recipe: str, controller: str, gpus: int, steps: int, model: Path, store: Path, name: str,
                  full: bool = False) -> list[str]:
    """Random weights from `model`, the varied reward, MLflow in `store`; the batch is the script's (`full`)
    or cut to PROMPTS_PER_GPU per GPU, with an engine share that leaves 2 GPUs room for the 8B state."""
    overrides = [f"model.path={model}", "model.init=random",
                 f"trainer.total_steps={steps}", "trainer.test_freq=0", "trainer.save_freq=0",
                 f"trainer.output_dir={store.parent / 'outputs' / name}",
                 f"reward.custom_function.path={ROOT / 'bench/common/varied_reward.py'}",
                 "reward.custom_function.name=compute_score",
                 f"tracking.uri=file:{store}", "tracking.experiment=scale", f"tracking.run_name={name}",
                 "tracking.backends=[console,mlflow]"]
    if not full:
        prompts = PROMPTS_PER_GPU[recipe] * gpus
        overrides += [f"data.train_batch_size={prompts}",
                      f"actor.ppo_mini_batch_size={prompts // 2}",  # two optimizer steps per rollout
                      "rollout.gpu_memory_utilization=0.35"]
    return overrides + (["trainer.controller=ray"] if controller == "ray" else [])


def script_env(gpus: int, data: Path, **extra: str) -> dict[str, str]:
    """The scripts call `python` and `torchrun` from PATH: this interpreter's come first, so a suite started as
    `.venv/bin/python -m bench.scale.suite` without activating the venv runs them with its own packages."""
    path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    return {**os.environ, "PATH": path, "NGPUS": str(gpus), "DATA": str(data), **extra}


def script_plan(recipe: str, gpus: int, overrides: list[str], data: Path, plan_json: Path) -> tuple[list[str], str, dict]:
    """The script's own dry run with these overrides (offline, no GPU): the command, the plan it prints, and
    the plan and resolved config it writes to `plan_json`. A config the real run would refuse fails here."""
    command = ["bash", f"recipes/{recipe}/run_qwen3_8b.sh", "--dry-run", "--plan-json", str(plan_json), *overrides]
    env = script_env(gpus, data, HF_HUB_OFFLINE="1")
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"the dry run of recipes/{recipe}/run_qwen3_8b.sh at {gpus} GPUs failed: "
                           f"{done.stderr.strip() or done.stdout.strip()}")
    return command, done.stdout, json.loads(plan_json.read_text())


def step_history(store: Path, name: str, experiment: str = "scale") -> dict[int, dict[str, float]]:
    """{step: {metric: value}} of the newest run named `name` in the MLflow file store's `experiment` ({} if none)."""
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=f"file:{store}")
    experiment = client.get_experiment_by_name(experiment)
    runs = client.search_runs([experiment.experiment_id], f"tags.mlflow.runName = '{name}'",
                              order_by=["attribute.start_time DESC"], max_results=1) if experiment else []
    steps: dict[int, dict[str, float]] = {}
    if not runs:  # stopped before its MLflow run opened
        return steps
    for key in runs[0].data.metrics:
        for point in client.get_metric_history(runs[0].info.run_id, key):
            steps.setdefault(point.step, {})[key] = point.value
    return steps


def finished_steps(history: dict[int, dict[str, float]]) -> int:
    return max((s for s in history if "timing_s/step" in history[s]), default=0)


def stop_note(finished: int, steps: int) -> str:
    """Where the time limit stopped a run: inside its steps, or in its shutdown after the last one."""
    return f"after step {finished} of {steps}" + (" (in its shutdown)" if finished >= steps else "")


def summarise(history: dict[int, dict[str, float]], gpus: int, config: dict) -> dict:
    """Medians over the steps after step 1 (step 1 holds one-off compiles and allocations)."""
    later = [history[s] for s in sorted(history) if s >= 2 and "timing_s/step" in history[s]]
    # The start record is logged with the first step (step 0 holds the validation before it, if any).
    first = next((history[s] for s in sorted(history) if "timing_s/step" in history[s]), {})

    def median(key: str) -> float | None:
        values = [m[key] for m in later if key in m]
        return statistics.median(values) if values else None

    step_s, gen_s, update_s = median("timing_s/step"), median("timing_s/gen"), median("timing_s/update_actor")
    generated, tokens = median("rollout/generated_tokens"), median("perf/total_num_tokens")
    # The generation stage's own tokens: a recipe's untrained ones too (ReMax's greedy baseline).
    decoded = (generated or 0) + (median("rollout/baseline_tokens") or 0)
    mean_len = (median("prompt_length/mean") or 0) + (median("response_length/mean") or 0)
    return {
        "median_step_s": step_s,
        "stages_s": {stage: median(f"timing_s/{stage}") for stage in STAGES if median(f"timing_s/{stage}") is not None},
        "start_s": {key.removeprefix(START_PREFIX): value for key, value in first.items() if key.startswith(START_PREFIX)},
        "generated_tokens_per_s_per_gpu": decoded / gen_s / gpus if generated and gen_s else None,
        "trained_tokens_per_s_per_gpu": tokens / step_s / gpus if tokens and step_s else None,
        "update_mfu": update_flops(config, tokens, mean_len, generated) / (update_s * gpus * PEAK_BF16)
        if tokens and update_s else None,
        "steps": {str(s): history[s] for s in sorted(history)},
    }


def update_flops(config: dict, tokens: float, mean_len: float, response_tokens: float) -> float:
    """Useful FLOPs of one pass of the policy update over the batch (as bench/perf/train_mfu_gpu.py counts
    them; Σ s² taken as rows × mean length², exact when lengths are equal, as with random weights)."""
    hidden, layers, heads = config["hidden_size"], config["num_hidden_layers"], config["num_attention_heads"]
    head_dim = config.get("head_dim") or hidden // heads
    kv_heads = config.get("num_key_value_heads", heads)
    per_layer = hidden * head_dim * (2 * heads + 2 * kv_heads) + 3 * hidden * config["intermediate_size"]
    rows = tokens / max(mean_len, 1)
    attention = 6 * layers * heads * head_dim * rows * mean_len ** 2
    return 6 * layers * per_layer * tokens + attention + 6 * config["vocab_size"] * hidden * response_tokens


def suite_settings(tag: str, overrides: list[str], full: bool, with_defaults: bool = True) -> tuple[str, list[str]]:
    """(the tag, the overrides) of a run or plan: at the scaled settings SUITE_DEFAULTS come first, each unless an
    override sets its key, and a run at all of them is tagged DEFAULT_TAG unless given a tag; `--full` runs are
    the script's own settings, untouched."""
    if full or not with_defaults:
        return tag, list(overrides)
    given = dict(override.split("=", 1) for override in overrides if "=" in override)
    added = [f"{key}={value}" for key, value in SUITE_DEFAULTS.items() if key not in given]
    at_defaults = all(given.get(key, value) == value for key, value in SUITE_DEFAULTS.items())
    return tag or (DEFAULT_TAG if at_defaults else ""), [*added, *overrides]


def settings_label(full: bool, overrides: list[str]) -> str:
    """A run's (or plan's) settings as the report matches them: `scaled` or `script`, then each override."""
    return " + ".join(["script" if full else "scaled", *overrides])


def run_name(recipe: str, model: Path, gpus: int, controller: str, tag: str = "") -> str:
    """`grpo_qwen3-8b_2gpu_torchrun`, with `_<tag>` for a run with overrides beside the one without."""
    return f"{recipe}_{model.name.removeprefix('model-')}_{gpus}gpu_{controller}" + (f"_{tag}" if tag else "")


def run_one(args, recipe: str, controller: str, gpus: int, model: Path, data: Path, work: Path) -> dict:
    tag, overrides = suite_settings(args.tag, args.overrides, args.full, not args.no_expandable_segments)
    name = run_name(recipe, model, gpus, controller, tag)
    store = work / "mlruns"
    command = ["bash", f"recipes/{recipe}/run_qwen3_8b.sh",
               *run_overrides(recipe, controller, gpus, args.steps, model, store, name, args.full), *overrides]
    env = script_env(gpus, data, MLFLOW_ALLOW_FILE_STORE="true")
    print(f"[scale] {name}: starting ({' '.join(command)})", flush=True)
    # A run its --timeout-s stops keeps the steps it finished (marked so): a Ray start can take minutes.
    wall, memory, stopped = run_logged_until(name, command, work / "logs" / f"{name}.log", cwd=ROOT,
                                             timeout_s=args.timeout_s, env=env)
    config = json.loads((model / "config.json").read_text())
    history = step_history(store, name)
    result = {"name": name, "recipe": recipe, "gpus": gpus, "settings": settings_label(args.full, overrides),
              "model": f"{model.name.removeprefix('model-')} (random init from its config)",
              "controller": controller, "device": device_name(), "commit": git_commit(ROOT),
              "command": f"NGPUS={gpus} DATA={data} " + " ".join(command),
              "wall_s": wall, "peak_memory_gib": memory.peaks_gib(), "memory_total_gib": memory.totals_gib(),
              **summarise(history, gpus, config)}
    if stopped:
        result["stopped_by_time_limit"] = stop_note(finished_steps(history), args.steps)
    peak = f"peak {max(result['peak_memory_gib']):.1f} GiB, " if result["peak_memory_gib"] else ""
    start = f"start {result['start_s']['total']:.0f} s, " if "total" in result["start_s"] else ""
    step = "no step after step 1" if result["median_step_s"] is None else f"{result['median_step_s']:.1f} s/step"
    stop = f" (stopped by --timeout-s {result['stopped_by_time_limit']})" if stopped else ""
    print(f"[scale] {name}: {step} (median after step 1){stop}, {start}{peak}wall {wall:.0f} s", flush=True)
    return result


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch

    gpus = args.gpus or torch.cuda.device_count()
    work, out = Path(args.work), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model, data = model_dir(Path(args.config_dir), work), ensure_data(Path(args.data))
    for recipe in args.recipes:
        plan = preflight(args, recipe, gpus, model, data, work)
        raw = None if args.no_raw_vllm else raw_vllm(recipe, model, data, work,
                                                     plan["plan"]["batch"]["prompts_per_step"] // gpus, plan["config"])
        for controller in args.controllers:
            result = run_one(args, recipe, controller, gpus, model, data, work)
            result["raw_vllm_tokens_per_s_per_gpu"] = raw
            if raw and result["generated_tokens_per_s_per_gpu"]:
                result["gen_vs_raw_vllm"] = result["generated_tokens_per_s_per_gpu"] / raw
            path = out / f"{result['name']}.json"
            path.write_text(json.dumps(result, indent=1) + "\n")
            print(f"[scale] wrote {path}", flush=True)
    return 0


def preflight(args, recipe: str, gpus: int, model: Path, data: Path, work: Path) -> dict:
    """Every controller's config through the script's own dry run, so a bad setting fails before any GPU
    work; returns the first one's plan and resolved config."""
    plans = []
    given = suite_settings(args.tag, args.overrides, args.full, not args.no_expandable_segments)[1]
    for controller in args.controllers:
        overrides = run_overrides(recipe, controller, gpus, args.steps, model, work / "mlruns", "preflight", args.full)
        plans.append(script_plan(recipe, gpus, [*overrides, *given], data,
                                 work / f"plan_{recipe}_{controller}.json")[2])
    return plans[0]


def raw_vllm(recipe: str, model: Path, data: Path, work: Path, prompts: int, config: dict) -> float | None:
    """Raw `vllm.LLM.generate` tokens/s on one GPU at this recipe's per-GPU batch (`prompts`), and the n,
    lengths and engine share of `config`, the resolved config of its dry run."""
    out = work / f"raw_vllm_{recipe}.json"
    command = [sys.executable, str(ROOT / "bench/scale/raw_vllm.py"), "--model", str(model), "--recipe", recipe,
               "--prompts", str(prompts), "--n", str(config["rollout"]["n"]),
               "--max-prompt-length", str(config["data"]["max_prompt_length"]),
               "--max-response-length", str(config["data"]["max_response_length"]),
               "--gpu-memory-utilization", str(config["rollout"]["gpu_memory_utilization"]), "--data", str(data),
               "--out", str(out)]
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]}
    print(f"[scale] raw vLLM reference for {recipe}", flush=True)
    subprocess.run(command, cwd=ROOT, env=env, check=True)
    return json.loads(out.read_text())["tokens_per_s"]


if __name__ == "__main__":
    sys.exit(main())
