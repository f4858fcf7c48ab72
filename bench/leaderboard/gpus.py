"""The leaderboard driver's GPUs (`recipezoo leaderboard run --gpus`): which ids, their names, where the next
job goes, and each run's share of its GPU's time. Only nvidia-smi is asked, never torch: the driver must not hold a
CUDA context on any GPU its jobs use.
"""

from __future__ import annotations

import subprocess


def gpu_ids(spec: str) -> list[str]:
    """CUDA device ids to use; [""] means one CPU-only slot group (CUDA_VISIBLE_DEVICES left as is)."""
    if spec == "cpu":
        return [""]
    if spec != "auto":
        return [gpu.strip() for gpu in spec.split(",") if gpu.strip()]
    try:
        listed = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"], capture_output=True,
                                text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        listed = []
    return listed or [""]


def free_gpus(count: int, running: list, gpus: list[str], runs_per_gpu: int) -> str | None:
    """CUDA_VISIBLE_DEVICES for a job of `count` GPUs, or None while none can start. A one-GPU job goes to the
    least busy GPU with fewer than --runs-per-gpu jobs; a job of several GPUs takes idle ones, and holds them
    alone (its Ray workers size their memory by the whole GPU)."""
    load = {gpu: 0 for gpu in gpus}
    held = set()  # GPUs of running multi-GPU jobs
    for job in running:
        ids = job.gpu.split(",")
        for gpu in ids:
            load[gpu] = load.get(gpu, 0) + 1
        held.update(ids if len(ids) > 1 else [])
    if count > 1:
        idle = [gpu for gpu in gpus if load[gpu] == 0]
        return ",".join(idle[:count]) if len(idle) >= count else None
    open_gpus = [gpu for gpu in gpus if gpu not in held and load[gpu] < runs_per_gpu]
    return min(open_gpus, key=lambda g: (load[g], gpus.index(g))) if open_gpus else None


def gpu_names(gpus: list[str]) -> dict[str, str]:
    """GPU id -> name, from nvidia-smi (not torch: this process must not hold a CUDA context on any GPU)."""
    names = {}
    for gpu in (gpu for gpu in gpus if gpu):
        try:
            names[gpu] = subprocess.run(["nvidia-smi", "-i", gpu, "--query-gpu=name", "--format=csv,noheader"],
                                        capture_output=True, text=True).stdout.strip()
        except OSError:
            names[gpu] = ""
        names[gpu] = names[gpu] or f"GPU {gpu}"
    return names


def gpu_total_bytes(gpu: str) -> float | None:
    """GPU `gpu`'s memory as nvidia-smi counts it, or None without one."""
    if not gpu:
        return None
    try:
        mib = subprocess.run(["nvidia-smi", "-i", gpu, "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        return None
    return float(mib[0]) * 2**20 if mib else None


def compute_process_counts() -> dict[str, int]:
    """GPU id -> the compute processes nvidia-smi lists on it now, whoever started them ({} without nvidia-smi):
    what shared a run's GPU, which the driver's own job count misses when other work runs there too."""
    try:
        uuids = dict(line.split(", ") for line in subprocess.run(
            ["nvidia-smi", "--query-gpu=uuid,index", "--format=csv,noheader"], capture_output=True, text=True,
            check=True).stdout.splitlines() if ", " in line)
        apps = subprocess.run(["nvidia-smi", "--query-compute-apps=gpu_uuid,pid", "--format=csv,noheader"],
                              capture_output=True, text=True, check=True).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError, ValueError):
        return {}
    counts = {index: 0 for index in uuids.values()}
    for line in apps:
        index = uuids.get(line.split(", ")[0])
        if index is not None:
            counts[index] += 1
    return counts


def note_gpu_processes(running: list, counts: dict[str, int], now: float) -> None:
    """Keep what nvidia-smi lists on each running job's GPUs now (a disaggregated job's busiest one), with its time:
    the job's GPU charge and the most processes it saw both come from these readings."""
    for job in running:
        seen = [counts[gpu] for gpu in job.gpu.split(",") if gpu in counts]
        if seen:  # a new list: jobs copied with dataclasses.replace (tool_modes, sft_stage) start with the same one
            job.gpu_process_readings = [*job.gpu_process_readings, (now, max(seen))]


def fair_share(start: float, end: float, intervals: list[tuple[float, float]],
               readings: list[tuple[float, int]] = ()) -> tuple[float, int]:
    """GPU-seconds of [start, end] when at each moment the GPU is split evenly among its processes; and the most
    of the invocation's own at once. The processes at a moment: the `intervals` (the invocation's own jobs)
    covering it, or the latest nvidia-smi reading's count (time, processes) before it when that is higher, as when
    another invocation's or a user's jobs share the GPU."""
    times = {t for interval in intervals for t in interval} | {t for t, _ in readings}
    points = sorted({start, end, *(t for t in times if start < t < end)})
    seconds, most = 0.0, 0
    for low, high in zip(points, points[1:]):
        middle = (low + high) / 2
        own = sum(1 for begin, finish in intervals if begin <= middle < finish)
        count = max(own, _reading_at(readings, middle))
        seconds += (high - low) / max(count, 1)
        most = max(most, own)
    return seconds, most


def _reading_at(readings: list[tuple[float, int]], moment: float) -> int:
    """The count of the latest reading taken at or before `moment` (0 before the first)."""
    earlier = [(t, n) for t, n in readings if t <= moment]
    return max(earlier)[1] if earlier else 0
