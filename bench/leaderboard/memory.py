"""Whether the jobs the leaderboard driver puts side by side on one GPU fit it together, said before any starts.

Each job's trainer checks its own memory plan at launch against the whole GPU (core/trainer/memory_estimate.py);
`--runs-per-gpu K` puts K jobs on one GPU, so K of them must fit at once. A job keeps its update's memory once its
first update ran (PyTorch's caching allocator holds it), so the figure summed is the plan's *must fit* of the
update. Four Qwen2.5-Coder-0.5B jobs on one H200 planned 33.5 GiB each and held 32.5–37.2 GiB in nvidia-smi; three
ran out of memory in their update (results/reasoning_gym_open_coder, 2026-11-28). SmolLM2 jobs ran 4 to an H100
where their plans sum to just over it, so this is a warning, not a refusal: the plan is close for the first and
pessimistic for the second. nvidia-smi, not torch, gives the GPU's size: the driver must hold no CUDA context.
"""

from __future__ import annotations

from bench.leaderboard.gpus import gpu_total_bytes
from core.trainer.memory_estimate import GIB, PEAK_TARGET


def job_must_fit_bytes(recipe: str, overrides: list[str], model_path: str, device_bytes: float) -> float | None:
    """One job's update, as its own launch check plans it (None for a model whose layers the plan cannot count)."""
    from core.config import load_config
    from core.trainer.memory_estimate import planned_roles, run_memory

    config = load_config(recipe, overrides)
    _, found = run_memory(config, model_path, 1, device_bytes, **planned_roles(config))
    return found.get("training_allocated")


def runs_per_gpu_warning(must_fit: dict[str, float], runs_per_gpu: int, device_bytes: float, device: str) -> str | None:
    """A line when `runs_per_gpu` of the largest job would pass PEAK_TARGET of the GPU, naming the K that fits."""
    if not must_fit or runs_per_gpu < 2:
        return None
    row, largest = max(must_fit.items(), key=lambda item: item[1])
    together, limit = runs_per_gpu * largest, PEAK_TARGET * device_bytes
    if together <= limit:
        return None
    fits = int(limit // largest)
    advice = f"--runs-per-gpu {fits} fits it ({fits * largest / GIB:.1f} GiB)" if fits else "one job alone does not"
    return (f"warning: --runs-per-gpu {runs_per_gpu}: a {row} job's update must hold {largest / GIB:.1f} GiB (its "
            f"memory plan), {runs_per_gpu} of them {together / GIB:.1f} GiB, over {PEAK_TARGET:.0%} of the {device}'s "
            f"{device_bytes / GIB:.1f} GiB: jobs may run out of memory; {advice}")


def jobs_memory_warning(jobs: list, command_of, model_path: str, gpus: list[str], devices: dict[str, str],
                        runs_per_gpu: int) -> str | None:
    """`runs_per_gpu_warning` for the queued one-GPU jobs, each row's plan from the command the driver will run."""
    device_bytes = gpu_total_bytes(gpus[0])
    if device_bytes is None:
        return None
    must_fit = {}
    for job in jobs:
        row = job.row or job.variant
        if job.variant is None or job.status != "queued" or job.schedule.gpus > 1 or row in must_fit:
            continue
        command = command_of(job)
        found = job_must_fit_bytes(command[command.index("--recipe") + 1], command[command.index("--") + 1:],
                                   model_path, device_bytes)
        if found:
            must_fit[row] = found
    return runs_per_gpu_warning(must_fit, runs_per_gpu, device_bytes, devices.get(gpus[0], f"GPU {gpus[0]}"))
