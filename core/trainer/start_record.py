"""How long a run takes to reach its first step, phase by phase: `perf/start_s/<phase>`, logged with the
first step's metrics (MLflow keeps them beside the step times) and printed as one `[start]` line.

Phases, in the order they run (a phase a run does not have is absent):
- driver_setup: process group, config checks, tokenizer, datasets (every rank, or the Ray driver)
- ray_init: joining or starting the Ray cluster; workers: until every Ray actor process is up
- setup: the Ray workers' setup, all of them side by side (rollout workers too, when disaggregated)
- dist_init, actor_model, actor_fsdp, ref, rollout_engine, first_sync, critic: inside a worker (under Ray
  the slowest worker's, which is what the group waits for); weight_group: the disaggregated weight stream's group
- roles: every role built (under Ray: all of the above from ray_init); tracking: MLflow's run opened
- resume, first_validation: before step 1; total: from the trainer's constructor to its first step
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Iterator

PREFIX = "perf/start_s/"


@contextmanager
def start_phase(name: str, record: dict[str, float]) -> Iterator[None]:
    """Add the block's seconds to `record[PREFIX + name]`."""
    began = time.perf_counter()
    try:
        yield
    finally:
        record[PREFIX + name] = record.get(PREFIX + name, 0.0) + time.perf_counter() - began


def slowest(records: list[dict[str, float]]) -> dict[str, float]:
    """Each phase's longest time over the workers: a group's start waits for its slowest worker."""
    merged: dict[str, float] = {}
    for record in records:
        for key, seconds in record.items():
            merged[key] = max(merged.get(key, 0.0), seconds)
    return merged


def start_line(record: dict[str, float]) -> str:
    """`[start] 97.3 s to the first step: ray_init 5.1 s | workers 9.8 s | ...`, phases in the order they ran."""
    phases = {key.removeprefix(PREFIX): seconds for key, seconds in record.items() if key != PREFIX + "total"}
    total = record.get(PREFIX + "total")
    head = f"[start] {total:.1f} s to the first step" if total is not None else "[start]"
    return head + ": " + " | ".join(f"{name} {seconds:.1f} s" for name, seconds in phases.items())
