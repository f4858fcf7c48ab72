"""Small helpers for metric dicts: float conversion, averaging over micro-batches, stage timers.

Metric keys follow verl's names (DESIGN §6) so runs from both frameworks overlay in one plot;
timers write `timing_s/<stage>` for the same reason.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Any, Iterable, Iterator, Mapping


def as_float(value: Any) -> float | None:
    """`value` as a Python float, or None when it is not a single number.

    Losses arrive as 0-d tensors, numpy scalars, ints or bools; loggers want plain floats.
    None instead of raising, so a stray string in a metrics dict never kills a long run.
    NaN and inf pass through unchanged: a diverging loss must show up, not be hidden.
    """
    if isinstance(value, (bool, int, float)):
        return float(value)
    item = getattr(value, "item", None)  # torch.Tensor, numpy scalar/array
    size = getattr(value, "numel", None) or getattr(value, "size", None)
    if callable(size):
        size = size()
    if callable(item) and (size is None or size == 1):
        try:
            result = item()
        except (ValueError, RuntimeError, TypeError):
            return None
        return float(result) if isinstance(result, (bool, int, float)) else None
    return None


def reduce_metrics(metrics_list: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """Mean of each key over the dicts that contain it (e.g. one dict per micro-batch).

    A key missing from some dicts is averaged over the dicts that have it, so a metric reported
    only by some micro-batches is not diluted by zeros. Values that are not numbers are dropped.
    """
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for metrics in metrics_list:
        for key, value in metrics.items():
            number = as_float(value)
            if number is None:
                continue
            sums[key] = sums.get(key, 0.0) + number
            counts[key] = counts.get(key, 0) + 1
    return {key: sums[key] / counts[key] for key in sums}


@contextmanager
def timed(name: str, timings: dict[str, float]) -> Iterator[None]:
    """Add the seconds spent in the block to `timings["timing_s/<name>"]`.

    Adds rather than overwrites: a stage may run several times in one step (DAPO keeps
    generating until the batch is full) and the step's metric should be the total.
    Recorded even when the block raises, so a crash report still shows where time went.
    """
    key = f"timing_s/{name}"
    start = time.perf_counter()
    try:
        yield
    finally:
        timings[key] = timings.get(key, 0.0) + (time.perf_counter() - start)
