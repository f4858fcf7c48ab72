"""Resolve `data.train_files` / `data.val_files`: a file path, a list of them, or the embedded task.

The embedded task is written to parquet in the cache first, so it is read by exactly the
dataset code that reads GSM8K.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from core.data import arithmetic, calculator
from core.data.dataset import DataError, write_rows

EMBEDDED_PREFIX = "embedded://"
EMBEDDED_SIZES = {"train": 3000, "val": 512}


def resolve_data_files(spec, split: str, cache_dir: Path) -> list[str]:
    """Paths for `split` ('train' or 'val'); materialises embedded datasets on first use."""
    specs = [spec] if isinstance(spec, str) else list(spec)
    return [_materialise(s, split, cache_dir) if s.startswith(EMBEDDED_PREFIX) else s for s in specs]


def _materialise(spec: str, split: str, cache_dir: Path) -> str:
    name = spec[len(EMBEDDED_PREFIX):]
    tasks = {arithmetic.DATA_SOURCE: (arithmetic.make_rows, f"max{arithmetic.MAX_OPERAND}"),
             calculator.DATA_SOURCE: (calculator.make_rows, f"{calculator.LEFT[1]}x{calculator.RIGHT[1]}")}
    if name not in tasks:
        raise DataError(f"data file {spec!r}: unknown embedded dataset — choose one of "
                        f"{[EMBEDDED_PREFIX + task for task in tasks]}")
    make_rows, shape = tasks[name]
    task_split = "train" if split == "train" else "test"
    size = EMBEDDED_SIZES[split]
    path = Path(cache_dir) / f"{name}-{task_split}-{shape}-n{size}.parquet"
    if not path.exists():
        rows = make_rows(task_split, size, seed=1 if split == "train" else 2)
        # A temporary file of its own: processes that start together on an empty cache (test workers, Ray
        # workers, leaderboard jobs) each write the same rows; with one shared name, one's rename took the
        # file from under the other's.
        tmp = path.with_name(f".{path.stem}.{os.getpid()}.{threading.get_ident()}.parquet")
        write_rows(rows, tmp)
        tmp.replace(path)
    return str(path)
