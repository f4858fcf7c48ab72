"""Row files: verl-schema datasets as lists of dicts, read from and written to .parquet or .jsonl.

Only pyarrow and the standard library: `recipezoo data` writes its files, and tools read them,
without loading torch (core/data/dataset.py, which tokenizes and batches rows, does).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Sequence

import pyarrow as pa
import pyarrow.parquet as pq

SUFFIXES = (".parquet", ".jsonl")
MISSING = object()  # get_field's default: a field absent (or None) at some level of its dotted key
REGENERATE_HINT = "regenerate it in verl's schema, e.g. `recipezoo data gsm8k --out DIR`"


class DataError(ValueError):
    """A data file the user must fix; the message names the file and what to do."""


def read_rows(path: str | os.PathLike) -> list[dict]:
    """All rows of a .parquet or .jsonl file as dicts (nested structs become dicts)."""
    path = Path(path)
    _check_suffix(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: no such file (relative paths resolve from {os.getcwd()}); "
            f"check data.train_files / data.val_files"
        )
    if path.stat().st_size == 0:
        raise DataError(f"{path}: the file is empty (0 bytes) — {REGENERATE_HINT}")
    if path.suffix == ".parquet":
        try:
            return pq.read_table(path).to_pylist()
        except (pa.ArrowException, OSError) as error:  # truncated, or not parquet at all
            raise DataError(f"{path}: not a readable parquet file ({error}) — {REGENERATE_HINT}") from None
    rows = []
    with path.open(encoding="utf-8") as f:
        for line_number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as error:
                raise DataError(
                    f"{path}:{line_number}: not valid JSON ({error.msg}) — each line must be one JSON object (a row)"
                ) from None
    return rows


def write_rows(rows: Sequence[dict], path: str | os.PathLike) -> Path:
    """Write rows as parquet or JSONL, chosen by the path's suffix; parent folders are created."""
    path = Path(path)
    _check_suffix(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".parquet":
        pq.write_table(pa.Table.from_pylist(list(rows)), path)
    else:
        with path.open("w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path


def get_field(row: dict, dotted_key: str, default=MISSING):
    """`row["a"]["b"]` for "a.b"; `default` when any level is missing or None."""
    value = row
    for part in dotted_key.split("."):
        if not isinstance(value, dict) or value.get(part) is None:
            return default
        value = value[part]
    return value


def _check_suffix(path: Path) -> None:
    if path.suffix not in SUFFIXES:
        raise DataError(f"{path}: unsupported file type {path.suffix!r} — use one of {list(SUFFIXES)}")


def column_values(rows: list[dict], path: str | Path, key: str, setting: str | None) -> list:
    """Field `key` (a dotted path) of every row; a DataError naming the file, the field, the config `setting` that
    names it and the fix when a row lacks it (`setting` None: data_source, which has no remapping key)."""
    values = [get_field(row, key) for row in rows]
    missing = [i for i, v in enumerate(values) if v is MISSING]
    if not missing:
        return values
    if setting:
        where = f" ({setting})"
        fix = (f"; set {setting}=<dotted.path> to the field that holds it, or convert the file with "
               "`recipezoo data <benchmark>`")
    else:  # data_source must be in the row: it picks the reward scorer
        where, fix = " (it names the reward scorer)", "; add it to every row"
    if len(missing) == len(rows):
        raise DataError(f"{path}: rows have no field {key!r}{where}; found fields {_found_fields(rows[0], key)}{fix}")
    raise DataError(
        f"{path}: {len(missing)} of {len(rows)} rows have no field {key!r}{where} "
        f"(first: row {missing[0]}, which has fields {_found_fields(rows[missing[0]], key)}){fix}"
    )


def _found_fields(row: dict, dotted_key: str) -> str:
    """The row's fields, plus those of the deepest dict on the key's path: a nested key missing
    from `reward_model` shows what `reward_model` does hold."""
    parts = dotted_key.split(".")
    value, depth = row, 0
    while depth < len(parts) - 1 and isinstance(value.get(parts[depth]), dict):
        value, depth = value[parts[depth]], depth + 1
    if depth == 0:
        return str(sorted(row))
    return f"{sorted(row)}, and {'.'.join(parts[:depth])!r} has {sorted(value)}"
