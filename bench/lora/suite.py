"""LoRA GRPO on one GPU with vLLM colocated: the rollout weight sync as merged weights, then as the adapter alone.

    bash bench/lora/suite.sh [--syncs merged adapter] [--steps 3] [--rank 16] [-- <config overrides>]
    bash bench/lora/suite.sh --full-weights --gpus 2 [-- actor.cpu_offload=true]   # the comparison row

`--full-weights` trains every weight instead, the same work on `--gpus` GPUs (one torchrun rank and one vLLM
engine each): what a user without LoRA needs for the same model. An 8B policy's fp32 AdamW state does not fit
two 80 GB GPUs beside the engine and the reference; the run's own memory check says so and names
`actor.cpu_offload=true`.

Qwen3-8B with random weights (`model.init=random`: the architecture from bench/configs/qwen3-8b; speed and
memory depend on the shapes, not on trained weights), a rank-16 adapter on every linear layer, the KL
reference from the same model with its adapters off. The prompts are the embedded arithmetic task (nothing
to download; `--data DIR` with train.parquet takes GSM8K instead) and the reward is bench/common/varied_reward.py,
which varies between samples so that every update changes the adapters the rollout engine receives.

Writes results/lora/grpo_lora-r<rank>-<sync>_<model>_1gpu.json per sync mode (grpo_full_<model>_<N>gpu.json
with --full-weights): the command, the median step
time after step 1 and its per-stage breakdown (`sync_weights` is the sync), generated and trained tokens/s,
the GPU's peak memory (nvidia-smi every 0.5 s); then results/lora/README.md (bench/lora/report.py).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from bench.common.gpu_memory import device_name, run_logged
from bench.lora.report import write_report
from bench.scale.suite import model_dir, step_history, summarise
from core.tracking.mlflow_tracker import git_commit

ROOT = Path(__file__).resolve().parents[2]
EXPERIMENT = "lora"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--syncs", nargs="+", default=["merged", "adapter"], choices=["merged", "adapter"],
                        help="actor.lora.sync of each run, in order")
    parser.add_argument("--steps", type=int, default=3, help="steps per run; times are medians after step 1")
    parser.add_argument("--rank", type=int, default=16, help="actor.lora.rank (alpha = 2 × rank)")
    parser.add_argument("--full-weights", action="store_true", help="one run training every weight, no LoRA")
    parser.add_argument("--gpus", type=int, default=1, help="torchrun ranks of the --full-weights run")
    parser.add_argument("--prompts", type=int, default=32, help="prompts per step (data.train_batch_size)")
    parser.add_argument("--n", type=int, default=4, help="samples per prompt (rollout.n)")
    parser.add_argument("--max-response", type=int, default=256, help="data.max_response_length")
    parser.add_argument("--rollout", default="vllm", help="rollout.name (hf: a CPU check of the suite, merged only)")
    parser.add_argument("--config-dir", default=str(ROOT / "bench/configs/qwen3-8b"))
    parser.add_argument("--data", default=None, help="a dir with train.parquet (GSM8K in verl's schema); "
                        "default: the embedded arithmetic task")
    parser.add_argument("--work", default="/tmp/recipezoo-lora", help="model dir, MLflow store, logs")
    parser.add_argument("--out", default=str(ROOT / "results/lora"))
    parser.add_argument("--timeout-s", type=int, default=300,
                        help="per run: a stuck run is stopped and the next one measured")
    parser.add_argument("overrides", nargs="*", help="extra config overrides for every run")
    args = parser.parse_args(argv)
    if args.rollout != "vllm" and "adapter" in args.syncs and not args.full_weights:
        parser.error("--syncs adapter needs --rollout vllm: only vLLM serves an adapter")
    if args.gpus < 1 or (args.gpus > 1 and not args.full_weights):
        parser.error(f"--gpus {args.gpus}: expected 1, or more with --full-weights (LoRA runs use one GPU)")
    return args


def run_overrides(args, sync: str | None, model: Path, store: Path, name: str) -> list[str]:
    """The run's config; sync None: full weights, no adapter."""
    data = Path(args.data) / "train.parquet" if args.data else "embedded://arithmetic"
    lora = [] if sync is None else [f"actor.lora.rank={args.rank}", f"actor.lora.alpha={2 * args.rank}",
                                    f"actor.lora.sync={sync}"]
    return [
        f"model.path={model}", "model.init=random", f"data.train_files={data}", f"data.val_files={data}",
        "data.max_prompt_length=512", f"data.max_response_length={args.max_response}",
        f"data.train_batch_size={args.prompts}", f"rollout.n={args.n}",
        f"actor.ppo_mini_batch_size={max(1, args.prompts // 2)}",  # two optimizer steps per rollout
        f"rollout.name={args.rollout}", "rollout.gpu_memory_utilization=0.35",
        *lora, f"trainer.n_gpus_per_node={args.gpus}", "actor.lr=1e-5", "actor.gradient_checkpointing=true",
        # Compiling each block takes minutes for an 8B model, more than a short run measures; off in every run.
        "actor.compile_layers=false",
        f"reward.custom_function.path={ROOT / 'bench/common/varied_reward.py'}", "reward.custom_function.name=compute_score",
        f"trainer.total_steps={args.steps}", "trainer.test_freq=0", "trainer.save_freq=0",
        f"trainer.output_dir={store.parent / 'outputs' / name}",
        f"tracking.uri=file:{store}", f"tracking.experiment={EXPERIMENT}", f"tracking.run_name={name}",
        "tracking.backends=[console,mlflow]",
    ]


def run_one(args, sync: str | None, model: Path, work: Path) -> dict:
    """One run; sync None: the --full-weights run on --gpus GPUs."""
    short = model.name.removeprefix("model-")
    name = f"grpo_full_{short}_{args.gpus}gpu" if sync is None else f"grpo_lora-r{args.rank}-{sync}_{short}_1gpu"
    store = work / "mlruns"
    launcher = [sys.executable] if args.gpus == 1 else ["torchrun", "--nnodes=1", f"--nproc_per_node={args.gpus}"]
    command = [*launcher, "-m", "core.cli", "train", "--recipe", "grpo",
               *run_overrides(args, sync, model, store, name), *args.overrides]
    print(f"[lora] {name}: starting", flush=True)
    # One GPU: the first, unless the caller chose; more: torchrun gives each rank its own.
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES", "0")} if args.gpus == 1 else None
    wall, memory = run_logged(name, command, work / "logs" / f"{name}.log", cwd=ROOT, timeout_s=args.timeout_s, env=env)
    config = json.loads((model / "config.json").read_text())
    summary = summarise(step_history(store, name, EXPERIMENT), args.gpus, config)
    if sync is not None:
        summary.pop("update_mfu")  # counts full-weight gradients, which a frozen base does not compute
    lora = None if sync is None else {"rank": args.rank, "alpha": 2 * args.rank, "target_modules": "all-linear"}
    result = {"name": name, "recipe": "grpo", "model": f"{short} (random init from its config)",
              "gpus": args.gpus, "device": device_name(), "sync": sync, "lora": lora,
              "controller": "torchrun" if args.gpus > 1 else "local",
              "rollout": args.rollout, "commit": git_commit(ROOT), "wall_s": wall,
              "command": " ".join(command[len(launcher) == 1:]),  # from `-m core.cli`, or from torchrun
              "peak_memory_gib": memory.peaks_gib(), "memory_total_gib": memory.totals_gib(),
              "sync_s": summary["stages_s"].get("sync_weights"), **summary}
    print(f"[lora] {name}: {result['median_step_s']:.1f} s/step, sync {result['sync_s'] or 0:.2f} s "
          f"(medians after step 1), wall {wall:.0f} s", flush=True)
    return result


def main(argv=None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")  # the runs' file store, read back here
    work, out = Path(args.work), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model = model_dir(Path(args.config_dir), work)
    failed = []
    for sync in [None] if args.full_weights else args.syncs:
        try:
            result = run_one(args, sync, model, work)
        except (RuntimeError, subprocess.TimeoutExpired) as error:  # the other sync mode still gets measured
            print(f"[lora] {sync or 'full-weight'} run failed: {error}", flush=True)
            failed.append(sync)
            continue
        path = out / f"{result['name']}.json"
        path.write_text(json.dumps(result, indent=1) + "\n")
        print(f"[lora] wrote {path}", flush=True)
    print(f"[lora] wrote {write_report(out)}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
