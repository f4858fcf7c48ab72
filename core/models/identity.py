"""Which model file a run started from, as one sha256: the leaderboard compares only rows that share it.

A model converted by `recipezoo fetch-model` is named by its source GGUF's sha256 (recorded in the converted
dir, and pinned per model in core/models/fetch.py); any other dir by the sha256 of its weight files, read in
name order.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

WEIGHT_PATTERNS = ("*.safetensors", "*.bin", "*.gguf")


def model_sha256(path: str | Path) -> str:
    """The model's identity hash; raises FileNotFoundError when `path` holds no weights."""
    from core.models.fetch import SOURCE_FILE

    path = Path(path)
    source = path / SOURCE_FILE
    if source.is_file():
        return json.loads(source.read_text())["gguf_sha256"]
    files = sorted(f for pattern in WEIGHT_PATTERNS for f in path.glob(pattern)) if path.is_dir() else [path]
    if not files or not all(f.is_file() for f in files):
        raise FileNotFoundError(f"{path}: no model weights ({', '.join(WEIGHT_PATTERNS)}) to identify the model by")
    digest = hashlib.sha256()
    for file in files:
        with open(file, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 22), b""):
                digest.update(block)
    return digest.hexdigest()
