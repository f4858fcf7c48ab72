"""Each GPU's peak memory in use while a block runs, read with nvidia-smi every `interval_s`.

The device's own count, not PyTorch's: vLLM allocates through its own pool, and a run's processes
(torchrun ranks, Ray workers) are children of the one being timed.

`run_logged` and `run_logged_until` run a benchmark's command under the monitor within a time limit: the first
fails at the limit, the second stops the run (with a grace, first through SIGTERM at its step boundary) and keeps
what it logged.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path


def device_name() -> str:
    """The first visible GPU's name as nvidia-smi gives it."""
    if shutil.which("nvidia-smi") is None:
        return "no NVIDIA GPU"
    probe = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True)
    return probe.stdout.strip().splitlines()[0] if probe.returncode == 0 and probe.stdout.strip() else "unknown"


def read_used_total_mib() -> list[tuple[float, float]]:
    command = ["nvidia-smi", "--query-gpu=memory.used,memory.total", "--format=csv,noheader,nounits"]
    if os.environ.get("CUDA_VISIBLE_DEVICES"):  # only the GPUs this run can use, not a neighbour's job on the others
        command.append(f"--id={os.environ['CUDA_VISIBLE_DEVICES']}")
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    return [tuple(float(x) for x in line.split(",")) for line in out.strip().splitlines()]


class PeakMemoryMonitor:
    def __init__(self, interval_s: float = 0.5):
        self.interval_s, self._stop = interval_s, threading.Event()
        self.peaks_mib: list[float] = []
        self.totals_mib: list[float] = []

    def __enter__(self) -> "PeakMemoryMonitor":
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _poll(self) -> None:
        if shutil.which("nvidia-smi") is None:
            return  # no NVIDIA GPU here (a CPU check of the suite): nothing to read
        while not self._stop.is_set():
            readings = read_used_total_mib()
            if not self.peaks_mib:
                self.peaks_mib, self.totals_mib = [0.0] * len(readings), [total for _, total in readings]
            self.peaks_mib = [max(peak, used) for peak, (used, _) in zip(self.peaks_mib, readings)]
            self._stop.wait(self.interval_s)

    def peaks_gib(self) -> list[float]:
        return [round(mib / 1024, 2) for mib in self.peaks_mib]

    def totals_gib(self) -> list[float]:
        return [round(mib / 1024, 2) for mib in self.totals_mib]


def run_logged(name: str, command: list[str], log: Path, *, cwd: Path, timeout_s: float,
               env: dict | None = None) -> tuple[float, PeakMemoryMonitor]:
    """Run `command` with its output in `log` while the GPUs' peak memory is read: (wall seconds, the monitor).
    A failure or the time limit raises with the log's last 30 lines, so a suite stops on the first broken run."""
    wall, memory, stopped = run_logged_until(name, command, log, cwd=cwd, timeout_s=timeout_s, env=env)
    if stopped:
        raise RuntimeError(f"{name} ran past its {timeout_s:.0f} s limit; log {log}:\n" + log_tail(log))
    return wall, memory


def run_logged_until(name: str, command: list[str], log: Path, *, cwd: Path, timeout_s: float,
                     env: dict | None = None, grace_s: float = 0) -> tuple[float, PeakMemoryMonitor, bool]:
    """As run_logged, but the time limit stops the run instead of failing it: (wall seconds, the monitor, stopped).
    With `grace_s`, the limit first sends SIGTERM to the command's own process and waits up to `grace_s` for it
    to exit: a trainer then ends at its step boundary and writes what it measured (core/trainer/signals.py;
    torchrun forwards the signal to its ranks). Not to its process group: vLLM's engine processes would die
    mid-step, leaving the step waiting on them. Then, grace or not, the command's process group and every process under
    it are killed: torchrun's ranks, vLLM's engine processes and a Ray cluster the driver started would otherwise
    outlive it and hold the GPUs. Each descendant is killed by its pid, not only through the group, because
    torchrun starts every rank in a session of its own. Whatever the run logged before (its MLflow steps) stays
    readable."""
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.time()
    with PeakMemoryMonitor() as memory, open(log, "w") as sink:
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=sink, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        try:
            returncode, stopped = process.wait(timeout=timeout_s), False
        except subprocess.TimeoutExpired:
            returncode, stopped = stop_process_tree(process, grace_s), True
    wall = time.time() - start
    if returncode and not stopped:
        raise RuntimeError(f"{name} exited {returncode} after {wall:.0f} s; log {log}:\n" + log_tail(log))
    return wall, memory, stopped


def stop_process_tree(process: subprocess.Popen, grace_s: float) -> int:
    """SIGTERM to `process` alone and up to `grace_s` for it to exit (none when 0), then SIGKILL to its whole tree."""
    tree = _descendants(process.pid)  # while it runs: once it exits, its children move to init and out of the tree
    if grace_s > 0:
        process.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=grace_s)
    if process.returncode is None:  # still running (its pid still its own): what it started in the grace too
        tree |= _descendants(process.pid)
    _kill_tree(process.pid, tree)
    return process.wait()


def _kill_tree(pid: int, tree: dict[int, str]) -> None:
    """SIGKILL the process group `pid` leads and the processes of `tree` (pid -> start time), whatever session
    each moved to."""
    with contextlib.suppress(ProcessLookupError):  # the group is gone: its leader exited in the grace, alone
        os.killpg(pid, signal.SIGKILL)
    for descendant, started in tree.items():
        if _start_time(descendant) == started:  # the same process, not a later one given its pid since
            with contextlib.suppress(ProcessLookupError):  # it exited since
                os.kill(descendant, signal.SIGKILL)


def _descendants(pid: int) -> dict[int, str]:
    """The pids under `pid` (children, grandchildren, ...) -> their start times, from each /proc/<pid>/stat."""
    children: dict[int, list[int]] = {}
    started: dict[int, str] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        fields = _stat_fields(entry.name)
        if fields:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
            started[int(entry.name)] = fields[19]
    found, generation = [], [pid]
    while generation:
        generation = [child for parent in generation for child in children.get(parent, [])]
        found += generation
    return {descendant: started[descendant] for descendant in found}


def _start_time(pid: int) -> str | None:
    """When `pid` started (clock ticks after boot), None once it exited: with the pid, a process's identity."""
    fields = _stat_fields(str(pid))
    return fields[19] if fields else None


def _stat_fields(pid: str) -> list[str]:
    """/proc/<pid>/stat's fields after the command name, which may hold spaces: state, ppid, ...; [] once it exited."""
    try:
        return (Path("/proc") / pid / "stat").read_text().rpartition(")")[2].split()
    except OSError:
        return []


def log_tail(log: Path, lines: int = 30) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
