"""The RLHF loop on one GPU: a reward model learned from the policy's own GSM8K rollouts, then GRPO and PPO trained
on it alone, beside GRPO and PPO on the rule reward, into one MLflow file store (results/reward_models/).

    python -m bench.reward_models.suite --out outputs/reward_models [--model pypi://Qwen2.5-Coder-0.5B-Instruct]
        [--time-budget-s 1500] [--concurrency 4] [--runs grpo-rule ppo-rule grpo-model ppo-model] [-- overrides]
    python -m bench.reward_models.report --store outputs/reward_models/mlruns --out results/reward_models

The jobs, in dependency order (each a `recipezoo` command in a process of its own, its log in OUT/logs/):
  data        `recipezoo data gsm8k` (train and test; skipped with --train-data/--val-data)
  generate    `recipezoo generate`: --prompts training prompts × --samples responses at --temperature
  pairs       `recipezoo preference-pairs --responses`: a right and a wrong response per prompt, graded by math_verify
  rm          `recipezoo rm` from the same base model (a fresh zero scalar head), --val-fraction of the prompts held
              out; rm/val/acc logged to the store
  <recipe>-rule   the recipe on the rule reward (math_verify, no format score)
  <recipe>-model  the recipe with the reward model as the only reward (reward.weights.rule=0, weights.model=1):
              the rule still grades every response, so `critic/acc/mean` and validation's `val/acc` stay the
              verifiable GSM8K accuracy, and `reward/model/mean` is the reward model's score
Up to --concurrency jobs run at once on the GPU, each engine with 1/K of --engine-memory (and --engine-kv-gib of
KV cache, so that side-by-side engines need not measure the free memory), launched --start-gap-s apart. A job that
finished is skipped when the command runs again (OUT/state.json), so a run cut short resumes; one that failed or
was stopped runs again from its start. STOP_GRACE_S before --time-budget-s each running job gets SIGTERM (a
trainer stops after its step in flight, its MLflow run kept; status stopped_by_budget), and jobs not yet started
are listed as such.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

EXPERIMENT = "reward-models"
JOB_TAG = "reward_suite_job"  # the MLflow tag naming a training run's job; the report groups by it
RECIPES = ("grpo", "ppo")
STOP_GRACE_S = 120  # after SIGTERM: the step in flight, then SIGKILL; both inside --time-budget-s


def allow_file_store() -> None:
    """A file store (a folder to copy off the GPU node) in this process and the jobs it starts: MLflow 3 refuses
    one unless asked."""
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")


@dataclass
class Job:
    name: str
    argv: list[str]
    needs: tuple[str, ...] = ()
    outputs: tuple[Path, ...] = ()  # written under a `.partial` name and renamed when the job succeeds
    training: bool = False  # a trainer (rm or RL): SIGTERM at the budget stops it after its step, not a failure
    run_dir: Path | None = None  # removed before a retry: a trainer refuses an output dir another run used


@dataclass
class State:
    """OUT/state.json: each job's status (done, failed, stopped_by_budget, not_started, skipped), seconds, log."""
    path: Path
    jobs: dict = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> State:
        return cls(path, json.loads(path.read_text()) if path.is_file() else {})

    def status(self, name: str) -> str | None:
        return self.jobs.get(name, {}).get("status")

    def record(self, name: str, **fields) -> None:
        self.jobs[name] = fields
        self.path.write_text(json.dumps(self.jobs, indent=1, sort_keys=True))


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="OUT/mlruns (the store), OUT/work, OUT/logs, OUT/state.json")
    parser.add_argument("--model", default="pypi://Qwen2.5-Coder-0.5B-Instruct")
    parser.add_argument("--train-data", help="GSM8K train parquet in verl's schema (default: `recipezoo data gsm8k`)")
    parser.add_argument("--val-data", help="GSM8K test parquet (default: `recipezoo data gsm8k`)")
    parser.add_argument("--gsm8k-local", help="a folder with GSM8K's train.jsonl and test.jsonl instead of the Hub")
    parser.add_argument("--prompts", type=int, default=1024, help="training prompts the reward model's pairs come from")
    parser.add_argument("--samples", type=int, default=4, help="responses per prompt for the pairs")
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--max-response", type=int, default=512, help="tokens per response, rollouts and RL alike")
    parser.add_argument("--max-pairs-per-prompt", type=int, default=2)
    parser.add_argument("--rm-epochs", type=int, default=2)
    parser.add_argument("--rm-lr", type=float, default=2e-6)
    parser.add_argument("--rm-batch-size", type=int, default=32)
    parser.add_argument("--val-fraction", type=float, default=0.1, help="prompts held out to measure the reward model")
    parser.add_argument("--runs", nargs="+", default=[f"{r}-{w}" for w in ("rule", "model") for r in RECIPES],
                        help="training jobs: <grpo|ppo>-<rule|model>")
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--batch-prompts", type=int, default=32, help="prompts per RL step")
    parser.add_argument("--n", type=int, default=8, help="responses per prompt per RL step")
    parser.add_argument("--mini-batch", type=int, default=16, help="prompts per optimizer step")
    parser.add_argument("--lr", type=float, default=1e-6)
    parser.add_argument("--critic-lr", type=float, default=1e-5)
    parser.add_argument("--test-freq", type=int, default=5)
    parser.add_argument("--val-samples", type=int, default=256, help="GSM8K test prompts each validation scores")
    parser.add_argument("--rollout", default="vllm", help="rollout.name (hf on a CPU)")
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda, for generate and rm")
    parser.add_argument("--concurrency", type=int, default=4, help="jobs at once on the GPU")
    parser.add_argument("--engine-memory", type=float, default=0.5, help="the engines' share of the GPU, all jobs")
    parser.add_argument("--engine-kv-gib", type=float, default=6.0, help="each engine's KV cache; 0: measured")
    parser.add_argument("--start-gap-s", type=float, default=45.0,
                        help="seconds between two job launches (generate's engine measures the free memory)")
    parser.add_argument("--time-budget-s", type=float, default=1500.0,
                        help="the whole command's wall time: a cap above the ~20 minutes the defaults are planned for")
    args, overrides = parser.parse_known_args(argv)
    args.overrides = [item for item in overrides if item != "--"]
    for run in args.runs:
        recipe, _, reward = run.partition("-")
        if recipe not in RECIPES or reward not in ("rule", "model"):
            parser.error(f"--runs: {run!r} is not <{'|'.join(RECIPES)}>-<rule|model>")
    if bool(args.train_data) != bool(args.val_data):
        parser.error("--train-data and --val-data go together (or neither: `recipezoo data gsm8k` makes both)")
    for flag, value in (("--train-data", args.train_data), ("--val-data", args.val_data)):
        if value and not Path(value).is_file():
            parser.error(f"{flag} {value}: no such file")
    if args.concurrency < 1 or not 0 < args.engine_memory <= 1:
        parser.error(f"--concurrency={args.concurrency} must be ≥ 1, --engine-memory={args.engine_memory:g} in (0, 1]")
    return args


def cli(*words) -> list[str]:
    return [sys.executable, "-m", "core.cli", *map(str, words)]


def plan(args: argparse.Namespace, out: Path) -> list[Job]:
    """Every job of the suite, each after the jobs it needs."""
    work, uri = out / "work", (out / "mlruns").resolve().as_uri()
    jobs, data_needs = [], ()
    train, val = args.train_data, args.val_data
    if not train:
        gsm8k = work / "gsm8k"
        if args.gsm8k_local:  # one local file per split
            local = Path(args.gsm8k_local)
            jobs += [Job("data", cli("data", "gsm8k", "--local", local / "train.jsonl", "--split", "train",
                                     "--out", gsm8k)),
                     Job("data-test", cli("data", "gsm8k", "--local", local / "test.jsonl", "--split", "test",
                                          "--out", gsm8k), ("data",))]
        else:  # both splits from the Hub in one download
            jobs.append(Job("data", cli("data", "gsm8k", "--out", gsm8k)))
        train, val, data_needs = gsm8k / "train.parquet", gsm8k / "test.parquet", tuple(job.name for job in jobs)
    share = round(args.engine_memory / args.concurrency, 3)
    rollouts, pairs, rm = work / "rollouts.parquet", work / "pairs.parquet", work / "rm"
    jobs += [
        Job("generate", cli("generate", "--model", args.model, "--data", train, "--n", args.samples,
                            "--temperature", args.temperature, "--max-tokens", args.max_response,
                            "--max-samples", args.prompts, "--batch-size", 256, "--rollout", args.rollout,
                            "--device", args.device, "--gpu-memory-utilization", share, "--out", partial(rollouts)),
            data_needs, (rollouts,)),
        Job("pairs", cli("preference-pairs", "--responses", rollouts, "--gsm8k-method", "math_verify",
                         "--max-pairs-per-prompt", args.max_pairs_per_prompt, "--out", partial(pairs)),
            ("generate",), (pairs,)),
        Job("rm", cli("rm", "--model", args.model, "--train-files", pairs, "--out", rm, "--epochs", args.rm_epochs,
                      "--lr", args.rm_lr, "--batch-size", args.rm_batch_size, "--val-fraction", args.val_fraction,
                      "--micro-batch-tokens", 16384, "--max-length", 2048, "--device", args.device,
                      "--mlflow-uri", uri, "--experiment", EXPERIMENT, "--run-name", "reward-model"),
            ("pairs",), training=True, run_dir=rm),
    ]
    for run in args.runs:
        recipe, _, reward = run.partition("-")
        rm_reward = [f"reward.model.path={rm / 'model'}", "reward.weights.rule=0", "reward.weights.model=1",
                     "reward.model.micro_batch_tokens=16384"] if reward == "model" else []
        needs = (*data_needs, *(("rm",) if reward == "model" else ()))
        argv = cli("train", "--recipe", recipe, *train_overrides(args, train, val, uri, share),
                   f"+tracking.tags.{JOB_TAG}={run}", f"trainer.output_dir={work / 'runs' / run}",
                   *(ppo_critic(args) if recipe == "ppo" else []),
                   *rm_reward, *args.overrides)
        jobs.append(Job(run, argv, needs, training=True, run_dir=work / "runs" / run))
    return jobs


def train_overrides(args: argparse.Namespace, train, val, uri: str, share: float) -> list[str]:
    """What every training job shares: the model, prompts, budget and the rule grader (math_verify reads the
    model's `\\boxed{N}`; no score for a wrong answer in the right format)."""
    threads = max(1, (os.cpu_count() or 1) // args.concurrency)
    return [
        f"model.path={args.model}", f"data.train_files={train}", f"data.val_files={val}",
        f"data.val_max_samples={args.val_samples}", f"data.train_batch_size={args.batch_prompts}",
        f"rollout.n={args.n}", f"actor.ppo_mini_batch_size={args.mini_batch}", "data.max_prompt_length=512",
        f"data.max_response_length={args.max_response}", f"actor.lr={args.lr}", f"trainer.total_steps={args.steps}",
        f"trainer.test_freq={args.test_freq}", "trainer.save_freq=0", "reward.gsm8k_method=math_verify",
        "reward.format_score=0", f"rollout.name={args.rollout}", f"rollout.gpu_memory_utilization={share}",
        *([f"+rollout.engine_kwargs.kv_cache_memory_bytes={int(args.engine_kv_gib * 2**30)}"]
          if args.engine_kv_gib and args.rollout == "vllm" else []),
        "actor.micro_batch_tokens=8192", "actor.gradient_checkpointing=true", f"trainer.num_threads={threads}",
        f"tracking.uri={uri}", f"tracking.experiment={EXPERIMENT}",
    ]


def ppo_critic(args: argparse.Namespace) -> list[str]:
    """A zero value head (V ≡ 0 at first, no random advantages), at a critic's lr for a 0.5B model."""
    return ["critic.value_head_init=zeros", f"critic.lr={args.critic_lr}", "critic.micro_batch_size=16"]


def partial(path: Path) -> Path:
    return path.with_name(path.stem + ".partial" + path.suffix)


def blocked_by(job: Job, state: State) -> str | None:
    """The first job `job` needs that can no longer give it its input."""
    return next((need for need in job.needs if state.status(need) in ("failed", "skipped", "not_started",
                                                                       "stopped_by_budget")), None)


class Scheduler:
    """Runs `jobs` at most `concurrency` at once, each once its needs are done, until all ended or the deadline."""

    def __init__(self, jobs: list[Job], state: State, logs: Path, concurrency: int, start_gap_s: float,
                 deadline: float):
        self.pending = [job for job in jobs if state.status(job.name) != "done"]
        self.state, self.logs, self.concurrency, self.start_gap_s = state, logs, concurrency, start_gap_s
        self.deadline, self.running, self.last_start = deadline, {}, 0.0
        for job in jobs:
            if state.status(job.name) == "done":
                print(f"skipping {job.name}: done in an earlier invocation", flush=True)
            else:  # an earlier invocation's failed or stopped attempt: this one runs it again
                state.record(job.name, status="pending")

    def run(self) -> None:
        while self.pending or self.running:
            self.reap()
            if time.time() >= self.deadline:
                self.stop_at_budget()
                return
            self.skip_blocked()
            ready = [job for job in self.pending if all(self.state.status(need) == "done" for need in job.needs)]
            if ready and len(self.running) < self.concurrency and time.time() - self.last_start >= self.start_gap_s:
                self.start(ready[0])
            time.sleep(0.5)

    def start(self, job: Job) -> None:
        self.pending.remove(job)
        if job.run_dir is not None and job.run_dir.exists():  # an earlier, unfinished attempt's
            shutil.rmtree(job.run_dir)
        log = self.logs / f"{job.name}.log"
        print(f"starting {job.name} ({time.strftime('%H:%M:%S')}; log {log})", flush=True)
        handle = log.open("w")
        process = subprocess.Popen(job.argv, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)
        self.running[job.name] = (job, process, time.time(), handle)
        self.last_start = time.time()

    def reap(self, stopped: bool = False) -> None:
        for name, (job, process, started, handle) in list(self.running.items()):
            rc = process.poll()
            if rc is None:
                continue
            handle.close()
            del self.running[name]
            status = "done" if rc == 0 and not stopped else "stopped_by_budget" if stopped and job.training else "failed"
            if status == "done":
                for output in job.outputs:
                    partial(output).replace(output)
            seconds = round(time.time() - started, 1)
            self.state.record(name, status=status, rc=rc, seconds=seconds, log=str(self.logs / f"{name}.log"))
            tail = "" if status == "done" else " | " + " | ".join(tail_lines(self.logs / f"{name}.log"))
            print(f"{name}: {status} (exit {rc}, {seconds:.0f} s){tail}", flush=True)

    def skip_blocked(self) -> None:
        for job in list(self.pending):
            need = blocked_by(job, self.state)
            if need is not None:
                self.pending.remove(job)
                self.state.record(job.name, status="skipped", reason=f"needs {need}, which is {self.state.status(need)}")
                print(f"{job.name}: skipped, {self.state.jobs[job.name]['reason']}", flush=True)

    def stop_at_budget(self) -> None:
        """SIGTERM to each running job's process group (a trainer stops after its step in flight), SIGKILL after
        STOP_GRACE_S; jobs not started are recorded as such."""
        for _, process, _, _ in self.running.values():
            os.killpg(process.pid, signal.SIGTERM)
        until = time.time() + STOP_GRACE_S
        while self.running and time.time() < until:
            self.reap(stopped=True)
            time.sleep(0.5)
        for _, process, _, _ in self.running.values():
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        self.reap(stopped=True)
        for job in self.pending:
            self.state.record(job.name, status="not_started", reason="the time budget ran out first")
            print(f"{job.name}: not started, the time budget ran out first", flush=True)


def tail_lines(log: Path, count: int = 3) -> list[str]:
    return log.read_text(errors="replace").strip().splitlines()[-count:] if log.is_file() else []


def main(argv: list[str] | None = None) -> int:
    started = time.time()
    args = parse_args(sys.argv[1:] if argv is None else argv)
    out = Path(args.out)
    allow_file_store()
    (out / "logs").mkdir(parents=True, exist_ok=True)
    (out / "work").mkdir(exist_ok=True)
    open_store((out / "mlruns").resolve().as_uri())
    state = State.load(out / "state.json")
    Scheduler(plan(args, out), state, out / "logs", args.concurrency, args.start_gap_s,
              started + args.time_budget_s - STOP_GRACE_S).run()
    summary = {status: sorted(name for name, job in state.jobs.items() if job["status"] == status)
               for status in ("done", "stopped_by_budget", "failed", "skipped", "not_started")}
    print("; ".join(f"{status}: {', '.join(names)}" for status, names in summary.items() if names), flush=True)
    print(f"report: python -m bench.reward_models.report --store {out / 'mlruns'} --out results/reward_models",
          flush=True)
    return 1 if summary["failed"] or summary["skipped"] else 0


def open_store(uri: str) -> None:
    """The experiment made before any job starts: two jobs creating it at once in a file store make two."""
    import mlflow

    client = mlflow.MlflowClient(uri)
    if client.get_experiment_by_name(EXPERIMENT) is None:
        client.create_experiment(EXPERIMENT)


if __name__ == "__main__":
    sys.exit(main())
