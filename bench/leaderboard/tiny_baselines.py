"""Recorded baselines: every recipe and variant on the embedded tiny task, several seeds, one budget.

Every run gets the same budget: `--steps` RL steps of 256 sampled sequences each (the tiny recipes'
batch sizes), greedy held-out accuracy on the same 256 test problems. Runs go to one MLflow
experiment; the leaderboard and its export are then built from it:

    python -m bench.leaderboard.tiny_baselines --seeds 0 1 2 --steps 120 --jobs 2 --uri sqlite:///$PWD/baselines.db
    recipezoo leaderboard report --uri sqlite:///$PWD/baselines.db --experiment tiny-baselines

The tool-use variants (recipes/tool_use: the calculator task, multi-turn) are not run by default; they go to
their own experiment and leaderboard (results/tool_use/README.md), at their recipe's budget:

    python -m bench.leaderboard.tiny_baselines --variants tool_use_grpo tool_use_rloo --steps 40 --test-freq 10 ...
    recipezoo leaderboard report --uri ... --experiment tiny-tool-use --export results/tool_use/runs.json \
        --out results/tool_use

On a machine with many cores, raise --jobs (each run uses --threads torch threads).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
VARIANTS = {
    "grpo": "grpo",
    "drgrpo": "recipes/grpo/drgrpo.yaml",
    "reinforce_pp": "recipes/grpo/reinforce_pp.yaml",
    "rloo": "rloo",
    "remax": "remax",
    "dapo": "dapo",
    "ppo": "ppo",
    "gspo": "recipes/grpo/gspo.yaml",
    "cispo": "recipes/grpo/cispo.yaml",
    "gpg": "recipes/grpo/gpg.yaml",
    "reinforce_pp_baseline": "recipes/grpo/reinforce_pp_baseline.yaml",
    "opo": "recipes/grpo/opo.yaml",
    "grpo_passk": "recipes/grpo/grpo_passk.yaml",
    "clip_cov": "entropy_cov",
    "kl_cov": "recipes/entropy_cov/kl_cov.yaml",
}
# `run_tiny.sh` and `run_tiny.sh --recipe rloo` of recipes/tool_use: the recipe, then the tool-use keys (a no-op on
# tool_use's own config).
TOOL_USE_VARIANTS = {"tool_use_grpo": "tool_use", "tool_use_rloo": "rloo"}
EXPERIMENT = "tiny-baselines"
TOOL_USE_EXPERIMENT = "tiny-tool-use"


def recipe_arguments(variant: str) -> list[str]:
    """The recipe and the overrides that make `variant`; a tool-use run is tagged with the variant's name."""
    if variant in TOOL_USE_VARIANTS:
        from recipes.tool_use.overrides import tool_use_overrides

        return [TOOL_USE_VARIANTS[variant], *tool_use_overrides(), f"tracking.tags.recipe={variant}"]
    return [VARIANTS[variant]]


def experiment(variant: str) -> str:
    return TOOL_USE_EXPERIMENT if variant in TOOL_USE_VARIANTS else EXPERIMENT


def run_one(variant: str, seed: int, args, log_dir: Path) -> tuple[str, int, int, float]:
    command = [
        sys.executable, "-m", "core.cli", "train", "--recipe", *recipe_arguments(variant),
        f"trainer.seed={seed}", f"trainer.total_steps={args.steps}", f"trainer.test_freq={args.test_freq}",
        f"trainer.num_threads={args.threads}", f"tracking.uri={args.uri}", f"tracking.experiment={experiment(variant)}",
        "tracking.backends=[mlflow]", f"tracking.run_name={variant}-seed{seed}",
        f"trainer.output_dir={log_dir}/{variant}-seed{seed}",
    ]
    python_path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "PYTHONPATH": python_path}
    start = time.time()
    with open(log_dir / f"{variant}-seed{seed}.log", "w") as log:
        code = subprocess.call(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    return variant, seed, code, time.time() - start


def warm_start_and_experiment(uri: str, variants: list[str]) -> None:
    """Train the shared warm-starts once and create the experiments before runs start in parallel."""
    import mlflow

    from core.models.tool_warmstart import tool_model_path
    from core.models.warmstart import warm_started_model_path

    if any(variant in VARIANTS for variant in variants):
        warm_started_model_path()
    if any(variant in TOOL_USE_VARIANTS for variant in variants):
        tool_model_path()
    client = mlflow.MlflowClient(uri)
    for name in sorted({experiment(variant) for variant in variants}):
        if client.get_experiment_by_name(name) is None:
            client.create_experiment(name)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=[*VARIANTS, *TOOL_USE_VARIANTS])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--test-freq", type=int, default=20)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--uri", default=f"sqlite:///{REPO}/baselines.db")
    parser.add_argument("--logs", default=str(REPO / "outputs" / "baselines"))
    args = parser.parse_args()

    log_dir = Path(args.logs)
    log_dir.mkdir(parents=True, exist_ok=True)
    warm_start_and_experiment(args.uri, args.variants)
    jobs = [(v, s) for s in args.seeds for v in args.variants]
    print(f"{len(jobs)} runs ({len(args.variants)} variants × {len(args.seeds)} seeds), {args.jobs} at a time", flush=True)
    failed = 0
    start = time.time()
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(run_one, v, s, args, log_dir) for v, s in jobs]
        for done, future in enumerate(futures, 1):
            variant, seed, code, seconds = future.result()
            failed += code != 0
            status = "ok" if code == 0 else f"FAILED (exit {code}, see {log_dir}/{variant}-seed{seed}.log)"
            print(f"[{done}/{len(jobs)}] {variant} seed {seed}: {status} in {seconds:.0f}s "
                  f"(elapsed {time.time() - start:.0f}s)", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
