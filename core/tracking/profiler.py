"""`trainer.profile_steps`: torch.profiler around chosen RL steps, written where a user reads it.

A profiled step writes `<trainer.output_dir>/profile/step_<k>_rank<r>.txt`: the operators that took the
most device time and the most host time, each stage's share of the step (`timing_s/*`), and whether the
host (Python, launches) or the device (kernels) bound it. `trainer.profile_trace: true` adds a Chrome
trace (`.json.gz`, open in https://ui.perfetto.dev). The profiler sees the process that runs `fit`: all of
the work under the local controller (each torchrun rank writes its own file); under Ray only the driver,
whose workers' kernels it does not see.
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext
from pathlib import Path

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

TOP_OPERATORS = 25


def step_profiler(config, step: int, rank: int, timings: dict[str, float]):
    """A context that profiles step `step` when `trainer.profile_steps` lists it; else a no-op.
    `timings` is the step's `timing_s/*` dict, read when the context ends (enter it before the step timer)."""
    trainer = config.trainer
    if step not in trainer.profile_steps:
        return nullcontext()
    stem = Path(trainer.output_dir) / "profile" / f"step_{step}_rank{rank}"
    return _profiled(stem, timings, with_trace=bool(trainer.profile_trace))


@contextmanager
def _profiled(stem: Path, timings: dict[str, float], with_trace: bool):
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with profile(activities=activities, record_shapes=False) as prof:
        yield
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".txt").write_text(profile_summary(prof, timings, ProfilerActivity.CUDA in activities))
    if with_trace:
        prof.export_chrome_trace(str(stem.with_suffix(".json.gz")))  # torch gzips a path ending in .gz
    print(f"profile of {stem.name} written to {stem.with_suffix('.txt')}", flush=True)


def profile_summary(prof, timings: dict[str, float], with_device: bool) -> str:
    """The report's text: step stages, host vs device time (`with_device`: kernels were recorded), and
    the top operators both ways."""
    averages = prof.key_averages()
    # Kernel time as torch's own table totals it: charged to the operators that launched the kernels
    # (the kernels' own rows repeat it).
    device_us = sum(event.self_device_time_total for event in averages
                    if event.device_type == DeviceType.CPU) if with_device else 0
    step_s = timings.get("timing_s/step", 0.0)
    lines = ["# stages (seconds)"]
    lines += [f"{key.removeprefix('timing_s/'):>16} {value:9.3f}" for key, value in timings.items()]
    if step_s and with_device:
        busy = device_us / 1e6 / step_s
        lines += ["", f"device busy: {device_us / 1e6:.3f} s of a {step_s:.3f} s step ({busy:.0%}): "
                  + ("the device bound the step" if busy > 0.8 else "the host (Python, launches, sync waits) "
                     "bound the step; fewer, larger kernels or micro-batches help more than faster kernels")]
    if with_device:
        lines += ["", "# top operators by device time",
                  averages.table(sort_by="self_device_time_total", row_limit=TOP_OPERATORS, max_name_column_width=60)]
    lines += ["", "# top operators by host time",
              averages.table(sort_by="self_cpu_time_total", row_limit=TOP_OPERATORS, max_name_column_width=60)]
    return "\n".join(lines) + "\n"
