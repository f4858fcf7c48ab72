"""Resolve `data.train_files` / `data.val_files`: a file path, a list of them, or the embedded task.

The embedded task is written to parquet in the cache first, so it is read by exactly the
dataset code that reads GSM8K.
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

from core.data import arithmetic, calculator
from core.data.rows import DataError, write_rows
from core.data.verifiers_tasks import VERIFIERS_DATA_PREFIX, taskset_rows

EMBEDDED_PREFIX = "embedded://"
EMBEDDED_SIZES = {"train": 3000, "val": 512}


def resolve_data_files(spec, split: str, cache_dir: Path) -> list[str]:
    """Paths for `split` ('train' or 'val'); materialises embedded datasets on first use."""
    specs = [spec] if isinstance(spec, str) else list(spec)
    return [_materialise(s, split, cache_dir) if s.startswith(EMBEDDED_PREFIX)
            else _verifiers_rows(s, split, cache_dir) if s.startswith(VERIFIERS_DATA_PREFIX) else s for s in specs]


def _verifiers_rows(spec: str, split: str, cache_dir: Path) -> str:
    """A verifiers taskset's rows, written anew each run (the taskset's code may have changed since)."""
    name = spec[len(VERIFIERS_DATA_PREFIX):]
    rows = taskset_rows(name, "data.train_files" if split == "train" else "data.val_files")
    digest = hashlib.sha256(name.encode()).hexdigest()[:12]
    path = Path(cache_dir) / f"verifiers-{digest}-{split}.parquet"
    _write_atomically(rows, path)
    return str(path)


def _write_atomically(rows: list[dict], path: Path) -> None:
    # A temporary file of its own: processes that start together on an empty cache (test workers, Ray
    # workers, leaderboard jobs) each write the same rows; with one shared name, one's rename took the
    # file from under the other's.
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.{threading.get_ident()}.parquet")
    write_rows(rows, tmp)
    tmp.replace(path)


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
        _write_atomically(make_rows(task_split, size, seed=1 if split == "train" else 2), path)
    return str(path)
