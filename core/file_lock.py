"""An exclusive lock on a file beside something several processes may create at once (a store, a cache dir)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def exclusive_file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive flock on `path` (created, with its folder) for the block: the first process in does
    the work, the others wait, then see it done. Where flock does not exist (Windows) the block runs unlocked,
    so parallel first runs there must be staggered."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock_file, fcntl.LOCK_UN)
