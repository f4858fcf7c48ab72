"""The driver's jobs as processes: each (recipe, seed) a `bench/leaderboard/job.py` process on its GPU, up to
--runs-per-gpu at once, started only with the time it needs left, stopped past --time-limit-s, and recorded as it
ends (done, stopped by its budget, or crashed with its log's tail and cause).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.leaderboard.bookkeeping import (
    JobTimes,
    crash_reason,
    discard_before_evals,
    earlier_job_seconds,
    last_step,
    steps_made,
    summary_line,
    tag_gpu_time,
)
from bench.leaderboard.gpus import compute_process_counts, free_gpus, note_gpu_processes
from bench.leaderboard.host import HostMemory
from bench.leaderboard.suites import SUITES
from core.leaderboard.schedules import RunSchedule

REPO = Path(__file__).resolve().parents[2]
LOG_TAIL_LINES = 40
PROCESS_READ_S = 15  # how often nvidia-smi's compute processes are read: a process living 15 s barely shares a GPU
GRACE_S, EXPORT_S = 40, 20  # with --time-limit-s: a job's overrun before it is stopped; the final export
MIN_TRAIN_S = 90            # engine start and a first step: a job with less time left is not started


@dataclass
class Job:
    name: str                     # grpo-seed0, or pretrained
    variant: str | None           # None: the pretrained model's evaluation
    seed: int
    row: str | None = None        # its leaderboard row (the `recipe` tag): the variant, or <variant>-lora<R>
    schedule: RunSchedule = RunSchedule()
    gpu: str = ""                 # CUDA_VISIBLE_DEVICES: one id, or several (a disaggregated job's)
    process: subprocess.Popen | None = None
    started: float = 0.0
    ended: float | None = None
    log: Path | None = None
    status: str = "queued"        # queued, running, done, stopped, crashed, not started
    summary: dict = field(default_factory=dict)
    killed_by_driver: bool = False  # past its hard limit (stop)
    error: str | None = None        # a crash's cause where its log names none
    gpu_process_readings: list = field(default_factory=list)  # (time, count) of each nvidia-smi reading, for its charge
    tool: bool = False              # a tool suite's job with the tool (tool_modes.py)
    eval_model: str | None = None   # its evaluations' eval_model tag, when not the model's own (the tool's label)
    model: str | None = None        # its starting point when not --model: the SFT model's dir (sft_stage.py)


    @property
    def gpu_processes_seen(self) -> int:
        """The most compute processes nvidia-smi listed on its GPU(s) while it ran (0: no reading)."""
        return max((count for _, count in self.gpu_process_readings), default=0)


def stamp() -> str:
    return time.strftime("%H:%M:%S")


def start_job(job: Job, command: list[str], out: Path, running_on_gpu: int) -> None:
    job.log = out / "logs" / f"{job.name}.log"
    job.log.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
           "PYTHONUNBUFFERED": "1", "MLFLOW_ALLOW_FILE_STORE": "true", "TOKENIZERS_PARALLELISM": "false"}
    if job.gpu:
        env["CUDA_VISIBLE_DEVICES"] = job.gpu
    env.pop("RAY_ADDRESS", None)  # a disaggregated job starts a Ray cluster of its own GPUs; joining one would share them
    with open(job.log, "w") as log:
        job.process = subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    job.started, job.status = time.time(), "running"
    where = f"GPU {job.gpu}" if job.gpu else "CPU"
    print(f"[{stamp()}] start {job.name} on {where} ({running_on_gpu + 1} running there) -> {job.log}", flush=True)


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    text = path.read_text(errors="replace").splitlines() if path and path.exists() else []
    return "\n".join("    " + line for line in text[-lines:])


def finish_job(job: Job, jobs: list[Job], out: Path, uri: str, devices: dict[str, str], experiment: str,
               host: HostMemory) -> None:
    """Record how the job ended, print it (a crash loudly, with its log's tail), charge its GPU time."""
    job.ended, code = time.time(), job.process.returncode
    summary_path = out / "work" / job.name / "summary.json"
    job.summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    took = f"{job.ended - job.started:.0f}s"
    if code == 0 and job.summary.get("status") == "done":
        job.status = "stopped" if job.summary.get("stopped") else "done"
        print(f"[{stamp()}] {job.status} {job.name} in {took}: {summary_line(job.summary)}", flush=True)
        if job.variant is not None:
            tag_gpu_time(uri, job, [other for other in jobs if other.gpu == job.gpu and other.started],
                         devices.get(job.gpu.split(",")[0], "CPU"))
        return
    job.status = "crashed"
    job.summary["steps"] = job.summary.get("steps") or steps_made(job.log)  # the jobs table says how far it got
    if job.variant is None:  # the pretrained model is evaluated once: partial figures would block a rerun
        discard_before_evals(uri, experiment, job.started)
    job.error = (host.killed_reason(code, job.killed_by_driver) or crash_reason(job.log)  # a rerun rewrites the log
                 or (f"stopped past the time limit at {last_step(job.log)}" if job.killed_by_driver else None))
    print(f"[{stamp()}] CRASHED {job.name} (exit {code}, after {took}); it is not counted. "
          + (f"It was {job.error}. " if job.error else "")
          + f"Last {LOG_TAIL_LINES} lines of {job.log}:\n{log_tail(job.log)}", flush=True)


def stop(job: Job) -> None:
    """Past its hard limit: Ctrl-C (the run ends KILLED), then SIGKILL."""
    print(f"[{stamp()}] {job.name} is past the time limit; stopping it (its runs are not counted)", flush=True)
    job.killed_by_driver = True
    job.process.send_signal(2)
    try:
        job.process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        job.process.kill()
        job.process.wait()


def run_jobs(jobs: list[Job], args, out: Path, uri: str, gpus: list[str], command_of, deadline: float | None,
             devices: dict[str, str]) -> None:
    """Keep up to --runs-per-gpu jobs on each GPU, the least busy GPU first; a heartbeat line a minute.
    A queued job starts only with the time it needs left before the deadline (JobTimes: its recipe's jobs here,
    in --out or in --timings-from; while none is known, the slowest recipe's here): a run stopped short of the
    budget is a weaker row than one not started, which a rerun will make whole. A job too long only by another
    recipe's time stays queued while one of its own recipe runs, the jobs behind it going first."""
    queue, running, beat, host = [job for job in jobs if job.status == "queued"], [], time.time(), HostMemory()
    times = JobTimes(args.min_job_s or args.reserve_s + MIN_TRAIN_S, args.reserve_s, earlier_job_seconds(
        [out, *map(Path, args.timings_from)], args.steps, args.runs_per_gpu, set(devices.values()), args.reserve_s))
    processes_read = 0.0
    while queue or running:
        host.sample()
        if running and time.time() - processes_read >= PROCESS_READ_S:
            processes_read = time.time()
            note_gpu_processes(running, compute_process_counts(), processes_read)
        for job in [job for job in running if job.process.poll() is not None]:
            running.remove(job)
            finish_job(job, jobs, out, uri, devices, SUITES[args.suite].experiment, host)
            if job.status == "done" and job.variant is not None:
                times.finished(job.variant, job.ended - job.started, job.summary.get("eval_s"))
        for job in running:
            if deadline is not None and time.time() > deadline + GRACE_S:
                stop(job)
        waiting = []  # too long by another recipe's time while one of its own runs: decided when that one ends
        while queue:
            gpu = free_gpus(queue[0].schedule.gpus, running, gpus, args.runs_per_gpu)
            if gpu is None:
                break
            job = queue.pop(0)
            needs = times.needs(job.variant)
            if deadline is not None and deadline - time.time() < needs:
                if not times.known(job.variant) and any(other.variant == job.variant for other in running):
                    waiting.append(job)
                    continue
                job.status = "not started"
                print(f"[{stamp()}] not starting {job.name}: too little time left before --time-limit-s "
                      f"(it needs {needs:.0f} s, {deadline - time.time():.0f} s are left once the final "
                      f"{GRACE_S + EXPORT_S} s for stopping and exporting are kept)", flush=True)
                continue
            job.gpu = gpu
            start_job(job, command_of(job), out, sum(job.gpu == other.gpu for other in running))
            running.append(job)
        queue[:0] = waiting
        if running and time.time() - beat >= 60:
            beat = time.time()
            parts = [f"{job.name} {last_step(job.log)}" for job in running] + [host.text()]
            print(f"[{stamp()}] running: " + ", ".join(part for part in parts if part), flush=True)
        time.sleep(1)
