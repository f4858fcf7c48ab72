"""Per-file SHA-256 checksums of a checkpoint dir: written with it, verified before it loads.

A bit flipped on disk or in a copy leaves a torch file that still opens and loads, silently wrong; its
checksum no longer matches. `SHA256SUMS` holds one `<hex>  <relative path>` line per file, the format
`sha256sum -c SHA256SUMS` reads, so a copied checkpoint can be checked with standard tools as well.

Files are hashed on a few threads (hashlib releases the GIL on large buffers): a checkpoint's model
and optimizer files are hashed side by side, at about the speed the disk reads them.
"""

from __future__ import annotations

import hashlib
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

CHECKSUM_FILE = "SHA256SUMS"
CHUNK_BYTES = 8 << 20
MAX_THREADS = 4


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def _hashes(directory: Path, relative_paths: list[str]) -> dict[str, str]:
    threads = max(1, min(MAX_THREADS, os.cpu_count() or 1, len(relative_paths)))
    with ThreadPoolExecutor(threads) as pool:
        digests = pool.map(lambda name: file_sha256(directory / name), relative_paths)
        return dict(zip(relative_paths, digests))


def write_checksums(directory: Path) -> Path:
    """Hash every file under `directory` into `directory/SHA256SUMS` (the caller fsyncs it)."""
    names = sorted(str(path.relative_to(directory)) for path in directory.rglob("*")
                   if path.is_file() and path.name != CHECKSUM_FILE)
    lines = [f"{digest}  {name}\n" for name, digest in _hashes(directory, names).items()]
    target = directory / CHECKSUM_FILE
    target.write_text("".join(lines))
    return target


def has_checksums(directory: Path) -> bool:
    return (directory / CHECKSUM_FILE).is_file()


def first_mismatch(directory: Path) -> str | None:
    """What is wrong with the first file that fails its checksum (missing, or changed); None: all match."""
    expected = {}
    for line in (directory / CHECKSUM_FILE).read_text().splitlines():
        digest, _, name = line.partition("  ")
        expected[name] = digest
    missing = sorted(name for name in expected if not (directory / name).is_file())
    if missing:
        return f"{directory / missing[0]} is missing (listed in {directory / CHECKSUM_FILE})"
    actual = _hashes(directory, sorted(expected))
    changed = [name for name in sorted(expected) if actual[name] != expected[name]]
    if changed:
        return (f"{directory / changed[0]} does not match its checksum in {directory / CHECKSUM_FILE} (the file "
                "changed after it was saved: a failing disk or a bad copy)")
    return None
