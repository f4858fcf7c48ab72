"""GRPO under each schedule, one run after the other on this node at the same settings: `sync` and
`one_step_off` on all its GPUs (colocated: each GPU holds a training rank and its rollout engine), then
`async` with partial rollouts, disaggregated, at each rollout+train GPU split.

    bash bench/async_rl/suite.sh [--model M] [--splits 1+1 ...] [--prompts P] [--steps S] --out DIR

(the commands for 2 and 4 H200s: bench/async_rl/suite.sh's header, and results/async/README.md from GPU_COMMANDS in
bench/async_rl/report.py).

`--model tiny` (the default) runs the embedded tiny model and arithmetic task (recipes/grpo/run_tiny.sh, hf
rollout, CPU is enough); any other model runs recipes/grpo/run_qwen3_8b.sh (vLLM) with `model.path` set to it: a
dir holding only config.json and tokenizer_config.json (bench/configs/*) gets random weights
(`model.init=random`, as bench/scale/suite.py does), anything else is loaded as pretrained. Every run's config
goes through the script's dry run before the first run starts, so a bad setting stops the suite at once.

Writes <out>/<run>.json per run: its command, settings, wall time, every step's metrics (MLflow) and the run's
timeline (core/trainer/timeline.py: who computed when). `python -m bench.async_rl.report` turns them into
results/async/README.md and results/async/timeline.png.

At `--timeout-s` a run gets SIGTERM: it ends the step in flight and writes its timeline, or is killed after
`--stop-grace-s`. Its json keeps the steps it made (`stopped_by_time_limit`: after which step), and the suite goes on
with the next run. A run that fails, or that the limit stopped before its first step ended, stops the suite.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

from bench.common.gpu_memory import device_name, log_tail, run_logged_until
from bench.scale.suite import ensure_data, model_dir, step_history, stop_note
from core.tracking.mlflow_tracker import git_commit
from core.trainer.schedule import SCHEDULES as SCHEDULE_CLASSES
from core.trainer.timeline import FILENAME as TIMELINE

ROOT = Path(__file__).resolve().parents[2]
SCHEDULES = tuple(SCHEDULE_CLASSES)  # sync, one_step_off, async
COLOCATED = SCHEDULES[:2]  # async runs disaggregated here
EXPERIMENT = "async"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny", help="tiny, a config dir (random init) or a pretrained model")
    parser.add_argument("--data", default=os.environ.get("DATA", str(Path.home() / "data/gsm8k")),
                        help="GSM8K train/test.parquet dir for a model other than tiny (made when missing)")
    parser.add_argument("--schedules", nargs="+", default=list(SCHEDULES), choices=SCHEDULES)
    parser.add_argument("--splits", nargs="+", default=[(1, 1)], type=split_arg,
                        help="async's rollout+train GPUs, e.g. 1+1 2+2 1+3")
    parser.add_argument("--gpus", type=int, default=0, help="GPUs of the colocated runs; 0: every GPU here (1 on CPU)")
    parser.add_argument("--controller", default="ray", choices=["ray", "local"],
                        help="the colocated runs' controller (async disaggregated always runs under Ray)")
    parser.add_argument("--prompts", type=int, default=64, help="prompts per step (data.train_batch_size)")
    parser.add_argument("--n", type=int, default=5, help="samples per prompt (rollout.n)")
    parser.add_argument("--response-length", type=int, default=1024, help="data.max_response_length")
    parser.add_argument("--steps", type=int, default=8, help="async's steady steps are 2..steps-max_staleness")
    parser.add_argument("--max-staleness", type=int, default=None, help="async's bound; default its own (2)")
    parser.add_argument("--colocated-memory", type=float, default=0.35,
                        help="vLLM's share of a GPU that also trains (rollout.gpu_memory_utilization)")
    parser.add_argument("--rollout-memory", type=float, default=0.85, help="vLLM's share of a rollout worker's GPU")
    parser.add_argument("--work", default="/tmp/recipezoo-async", help="model dir, MLflow store, run dirs, logs")
    parser.add_argument("--out", required=True, help="a folder for one json per run, e.g. results/async/2gpu")
    parser.add_argument("--timeout-s", type=int, default=3600, help="per run")
    parser.add_argument("--stop-grace-s", type=int, default=180,
                        help="after --timeout-s, the seconds a run has to end its step and write its timeline "
                             "(SIGTERM) before it is killed: one 8B step and the shutdown")
    parser.add_argument("--disaggregated-overrides", nargs="+", default=[], metavar="OVERRIDE",
                        help="config overrides for the async runs alone (after the overrides for every run), e.g. "
                             "actor.cpu_offload=true where one training GPU cannot hold the training state")
    parser.add_argument("overrides", nargs="*", help="extra config overrides for every run")
    return parser.parse_args(argv)


def split_arg(text: str) -> tuple[int, int]:
    rollout, _, train = text.partition("+")
    if not (rollout.isdigit() and train.isdigit() and int(rollout) >= 1 and int(train) >= 1):
        raise argparse.ArgumentTypeError(f"{text!r}: expected ROLLOUT+TRAIN GPUs, e.g. 1+1 or 1+3")
    return int(rollout), int(train)


def plan_runs(args, gpus: int) -> list[dict]:
    """Each run's name, schedule, devices and the overrides that make it (beyond the settings)."""
    runs = []
    for schedule in [s for s in args.schedules if s in COLOCATED]:
        runs.append({"name": schedule, "schedule": schedule, "placement": "colocated", "controller": args.controller,
                     "gpus": gpus, "train_gpus": gpus, "rollout_gpus": gpus, "overrides": [
                         f"trainer.schedule={schedule}", f"trainer.controller={args.controller}",
                         f"rollout.gpu_memory_utilization={args.colocated_memory}"]})
    if "async" in args.schedules:
        bound = [] if args.max_staleness is None else [f"trainer.max_staleness={args.max_staleness}"]
        for rollout, train in args.splits:
            runs.append({"name": f"async_{rollout}+{train}", "schedule": "async", "placement": "disaggregated",
                         "controller": "ray", "gpus": rollout + train, "train_gpus": train, "rollout_gpus": rollout,
                         "overrides": ["trainer.schedule=async", "trainer.partial_rollout=true", *bound,
                                       "trainer.controller=ray", "trainer.placement=disaggregated",
                                       f"trainer.rollout_workers={rollout}",
                                       f"rollout.gpu_memory_utilization={args.rollout_memory}",
                                       *args.disaggregated_overrides]})
    return runs


def check_splits(runs: list[dict], available: int, unit: str) -> None:
    """A split this node cannot hold stops the suite before anything runs: one line naming the flag."""
    for run in runs:
        if run["gpus"] > available:
            flag = "--gpus" if run["placement"] == "colocated" else "--splits"
            raise SystemExit(f"async_suite: {flag}: {run['name']} needs {run['gpus']} {unit} "
                             f"({run['rollout_gpus']} rollout + {run['train_gpus']} train), and this node has "
                             f"{available} — lower it")


class Setup:
    """The script, environment and overrides every run shares."""

    def __init__(self, args, work: Path, argv: list[str]):
        self.work, self.store = work, work / "mlruns"
        self.invocation = {"suite_command": shlex.join(["bash", "bench/async_rl/suite.sh", *argv]),
                           "prompts": args.prompts, "n": args.n, "response_length": args.response_length,
                           "total_steps": args.steps, "max_staleness": args.max_staleness, "extra_overrides": args.overrides,
                           "disaggregated_overrides": args.disaggregated_overrides}
        # A file store, read back here (step_history) as well as written by the runs: newer MLflow asks for consent.
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        # The scripts call `python`: this one, which has recipezoo installed, whatever PATH says.
        self.env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
        self.settings = [f"data.train_batch_size={args.prompts}", f"rollout.n={args.n}",
                         f"actor.ppo_mini_batch_size={max(args.prompts // 2, 1)}",  # two optimizer steps a rollout
                         f"data.max_response_length={args.response_length}", f"trainer.total_steps={args.steps}",
                         "trainer.test_freq=0", "trainer.save_freq=0", f"tracking.uri=file:{self.store}",
                         f"tracking.experiment={EXPERIMENT}", "tracking.backends=[console,mlflow]"]
        if args.model == "tiny":
            self.script, self.model = "recipes/grpo/run_tiny.sh", "tiny (embedded, arithmetic task)"
            # One torch thread per Python thread: the rollout thread and the update share a small CPU.
            self.settings.append("trainer.num_threads=1")
        else:
            self.script = "recipes/grpo/run_qwen3_8b.sh"
            self.env["DATA"] = str(ensure_data(Path(args.data)))
            self.settings += self._model_overrides(Path(args.model), args.model)
        self.settings += args.overrides

    def _model_overrides(self, path: Path, name: str) -> list[str]:
        """A config dir without weights: random init, reward varying between samples (nothing to learn)."""
        if path.is_dir() and not any(path.glob("*.safetensors")) and (path / "config.json").exists():
            self.model = f"{path.name} (random init from its config)"
            return [f"model.path={model_dir(path, self.work)}", "model.init=random",
                    f"reward.custom_function.path={ROOT / 'bench/common/varied_reward.py'}",
                    "reward.custom_function.name=compute_score"]
        self.model = name
        return [f"model.path={name}"]

    def command(self, run: dict, *flags: str) -> tuple[list[str], dict]:
        overrides = [*self.settings, *run["overrides"], f"trainer.n_gpus_per_node={run['train_gpus']}",
                     f"tracking.run_name={run['name']}",
                     f"trainer.output_dir={self.work / 'outputs' / run['name']}"]
        return ["bash", self.script, *flags, *overrides], {**self.env, "NGPUS": str(run["train_gpus"])}


def preflight(setup: Setup, runs: list[dict]) -> None:
    for run in runs:
        command, env = setup.command(run, "--dry-run")
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
        if done.returncode:
            error = (done.stderr.strip() or done.stdout.strip()).splitlines()[-1:]
            raise SystemExit(f"async_suite: {run['name']}'s dry run refused its config: {' '.join(error)}")


def run_one(setup: Setup, run: dict, args: argparse.Namespace, device: str) -> dict:
    """Run `run` and read back what it measured. A run the time limit stopped after a step is kept, with where it
    stopped; one stopped before its first step, or that failed, raises."""
    command, env = setup.command(run)
    print(f"[async] {run['name']}: {' '.join(command)}", flush=True)
    log, timeline_path = setup.work / "logs" / f"{run['name']}.log", setup.work / "outputs" / run["name"] / TIMELINE
    timeline_path.unlink(missing_ok=True)  # an earlier suite's, in the same --work: not this run's steps
    wall, memory, stopped = run_logged_until(run["name"], command, log, cwd=ROOT, timeout_s=args.timeout_s, env=env,
                                             grace_s=args.stop_grace_s)
    if stopped and not timeline_path.exists():
        raise RuntimeError(f"{run['name']} ran past its {args.timeout_s} s limit before its first step ended; "
                           f"log {log}:\n" + log_tail(log))
    timeline = json.loads(timeline_path.read_text())
    history = step_history(setup.store, run["name"], EXPERIMENT)
    stop = stop_note(max(step["step"] for step in timeline["steps"]), args.steps) if stopped else None
    print(f"[async] {run['name']}: {len(history)} steps in {wall:.0f} s"
          + (f" (stopped by --timeout-s {stop})" if stop else ""), flush=True)
    return {**run, **setup.invocation, "model": setup.model,
            "device": device, "commit": git_commit(ROOT), "command": f"NGPUS={env['NGPUS']} " + " ".join(command),
            "wall_s": wall, "peak_memory_gib": memory.peaks_gib(),
            "memory_total_gib": memory.totals_gib(), "stopped_by_time_limit": stop,
            "steps": {str(step): history[step] for step in sorted(history)}, "timeline": timeline}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    import torch

    visible = torch.cuda.device_count()
    runs = plan_runs(args, args.gpus or visible or 1)
    # On a CPU node Ray's workers take a CPU slot each instead of a GPU.
    check_splits(runs, visible or os.cpu_count(), "GPUs" if visible else "CPU slots")
    work, out = Path(args.work), Path(args.out)
    setup = Setup(args, work, argv)
    preflight(setup, runs)
    out.mkdir(parents=True, exist_ok=True)
    for run in runs:
        path = out / f"{run['name']}.json"
        result = run_one(setup, run, args, device_name() if visible else f"CPU ({os.cpu_count()} cores)")
        path.write_text(json.dumps(result, indent=1) + "\n")
        print(f"[async] wrote {path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
