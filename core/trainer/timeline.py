"""Who computes when: each step's spans (stage, start, end, devices), per role, written as the run's
`timeline.json` (its output dir, and an MLflow artifact when MLflow is on) once the run ends, or stops on a
signal at a step boundary.

The stage timers (`timing_s/*`) say how long each stage took but not what ran beside what: under
`one_step_off` and `async` the rollout engine generates the next batch while the trainer updates on this
one, so only the spans' positions show how much of a step each device waits. Roles:

- `train`: the trainer's stages on the training devices, except `gen`, which under an off-policy schedule
  is only a wait for the rollout thread; its work is the `rollout` role's `generate` span.
- `rollout`: each `generate` call on the rollout devices, on whichever thread runs it (a partial rollout
  records one span per segment, so the gaps are its waits for a weight sync).
- `sync`: the weight load into the engine on both, recorded inside the engine lock, not the wait for it.
- `host`: stages on the driver's CPU (reward, rollout correction, advantages): the devices idle then.

Devices are labelled `<type>:<index>`: under torchrun each rank's own device (every rank's spans are
gathered to rank 0 at the end); under Ray the training ranks are indices 0..N−1 and the disaggregated
rollout workers N.. (logical indices: Ray picks the physical GPUs). Times are wall-clock seconds since the
run's timeline started, on rank 0's clock.
"""

from __future__ import annotations

import json
import time
from contextlib import contextmanager
from pathlib import Path

from core.engine.distributed import all_gather_object

TRAIN, ROLLOUT, WEIGHT_SYNC, HOST = "train", "rollout", "sync", "host"
HOST_STAGES = ("reward", "rollout_corr", "adv")  # python on the driver's CPU, not on a device
RECORDED_ELSEWHERE = ("gen", "sync_weights")  # their device work is the rollout's and the sync's spans
FILENAME = "timeline.json"


class Timeline:
    def __init__(self, world, actor_rollout):
        self.start = time.time()
        self.devices = dict(zip((TRAIN, ROLLOUT), device_labels(world, actor_rollout)))
        self.devices[WEIGHT_SYNC] = sorted({*self.devices[TRAIN], *self.devices[ROLLOUT]}, key=device_order)
        self.devices[HOST] = [HOST]
        self.step_number = 0  # the step the trainer is in, read by the rollout thread's spans too
        self.spans: list[dict] = []  # appended from two threads: list.append is atomic
        self.steps: list[dict] = []

    @contextmanager
    def span(self, stage: str, role: str):
        start, step = time.time(), self.step_number
        try:
            yield
        finally:
            self.spans.append({"role": role, "stage": stage, "step": step, "start": start, "end": time.time(),
                               "devices": self.devices[role]})

    @contextmanager
    def stage(self, name: str):
        """A stage of the trainer's loop (`BaseTrainer.stage`), on the role that does its work."""
        if name in RECORDED_ELSEWHERE:
            yield
            return
        with self.span(name, HOST if name in HOST_STAGES else TRAIN):
            yield

    @contextmanager
    def step(self, number: int):
        self.step_number, start = number, time.time()
        try:
            yield
        finally:
            self.steps.append({"step": number, "start": start, "end": time.time()})

    def write(self, tracking, world, output_dir: str | Path) -> None:
        """Every rank's spans on rank 0, as `output_dir/timeline.json` and the MLflow run's artifact."""
        gathered = all_gather_object((self.start, self.spans))
        if not world.is_main:
            return
        origin = gathered[0][0]
        spans = sorted((span for _, rank_spans in gathered for span in rank_spans), key=lambda s: s["start"])
        path = Path(output_dir) / FILENAME
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({
            "devices": sorted({device for span in spans for device in span["devices"]}, key=device_order),
            "steps": [shifted(step, origin) for step in self.steps],
            "spans": [shifted(span, origin) for span in spans],
        }, indent=1) + "\n")
        tracking.log_artifact(path)


def shifted(record: dict, origin: float) -> dict:
    return {**record, "start": round(record["start"] - origin, 4), "end": round(record["end"] - origin, 4)}


def device_order(label: str) -> tuple[bool, str, int]:
    """cuda:2 before cuda:10; the host last."""
    kind, _, index = label.partition(":")
    return (kind == HOST, kind, int(index or 0))


def device_labels(world, actor_rollout) -> tuple[list[str], list[str]]:
    """(training devices, rollout devices) of this process's spans."""
    workers = getattr(actor_rollout, "num_workers", None)
    if workers is None:  # the local controller: this rank's device holds both roles
        device = world.device
        label = [f"{device.type}:{world.rank if device.index is None else device.index}"]
        return label, label
    kind = "cuda" if actor_rollout.gpus else "cpu"
    train = [f"{kind}:{rank}" for rank in range(workers)]
    rollout_workers = len(getattr(actor_rollout, "rollout_workers", []))
    return train, [f"{kind}:{workers + w}" for w in range(rollout_workers)] if rollout_workers else train


# ---- reading a timeline ------------------------------------------------------------------------------
def busy_seconds(spans: list[dict], device: str, window: tuple[float, float]) -> float:
    """Seconds of `window` in which `device` runs at least one span (overlapping spans count once)."""
    low, high = window
    intervals = sorted((max(s["start"], low), min(s["end"], high)) for s in spans
                       if device in s["devices"] and s["end"] > low and s["start"] < high)
    busy, reached = 0.0, low
    for start, end in intervals:
        if end > reached:
            busy += end - max(start, reached)
            reached = end
    return busy


def busy_shares(timeline: dict, steps: list[int]) -> dict[str, float]:
    """Each device's busy seconds over those steps' wall seconds (the host is not a device)."""
    windows = [(s["start"], s["end"]) for s in timeline["steps"] if s["step"] in steps]
    wall = sum(end - start for start, end in windows)
    devices = [device for device in timeline["devices"] if device != HOST]
    return {device: sum(busy_seconds(timeline["spans"], device, w) for w in windows) / wall for device in devices}
