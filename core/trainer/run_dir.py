"""A run's own directories, claimed before step 1 (by `recipezoo train`, on rank 0 only).

- `trainer.output_dir` gets a lock file naming the owner's pid and host, so a second run pointed at
  the same dir refuses to start instead of mixing its checkpoints with the first one's. A lock whose
  pid is no longer running on this host (a killed run) is taken over.
- `trainer.checkpoint_dir`, when the run saves checkpoints, is proven writable with a probe file, so
  a read-only path fails now and not at the first save, hours in; and it is locked the same way, so
  two runs with their own output dirs but one checkpoint dir cannot overwrite each other's steps.
"""

from __future__ import annotations

import errno
import os
import socket
import tempfile
from contextlib import contextmanager
from pathlib import Path

LOCK_NAME = ".recipezoo.lock"


class RunDirError(RuntimeError):
    """The output or checkpoint dir cannot be used; the message names the path and what to do."""


@contextmanager
def claimed_run_dirs(output_dir: str | Path, checkpoint_dir: str | Path, saves_checkpoints: bool):
    """Hold the output dir's lock, and the checkpoint dir's when the run saves, for the `with` block."""
    locks = [acquire_lock(Path(output_dir))]
    try:
        checkpoints = Path(checkpoint_dir)
        if saves_checkpoints:
            check_writable(checkpoints, "trainer.checkpoint_dir")
            if checkpoints.resolve() != Path(output_dir).resolve():
                locks.append(acquire_lock(checkpoints, "trainer.checkpoint_dir"))
        yield locks[0]
    finally:
        for lock in reversed(locks):
            release_lock(lock)


def acquire_lock(directory: Path, key: str = "trainer.output_dir") -> Path:
    """Lock `directory` (the dir `key` names) for this process, or refuse naming the run that holds it."""
    check_writable(directory, key)
    lock, owner = directory / LOCK_NAME, f"{os.getpid()} {socket.gethostname()}"
    also = " (or tracking.run_name)" if key == "trainer.output_dir" else ""
    for _ in range(2):  # a second try after a stale lock was removed
        if _create_with(lock, owner):
            return lock
        pid, host = _read_owner(lock)
        if _running(pid, host):
            raise RunDirError(f"{key}={directory} is in use by another run (pid {pid} on {host}; lock "
                              f"file {lock}) — wait for it to end, or give this run its own {key}{also}; "
                              "delete the lock file only if that run is gone")
        print(f"note: {lock} was left by pid {pid}, which is no longer running; this run takes it over", flush=True)
        lock.unlink(missing_ok=True)
    raise RunDirError(f"{key}={directory}: another run took {lock} while this one started — "
                      f"give this run its own {key}")


def release_lock(lock: Path) -> None:
    """Remove the lock if it is still ours (a run that took over a stale lock never loses it to us)."""
    if _read_owner(lock)[0] == os.getpid():
        lock.unlink(missing_ok=True)


def check_writable(directory: Path, key: str) -> None:
    try:
        directory.mkdir(parents=True, exist_ok=True)
        handle, probe = tempfile.mkstemp(dir=directory, prefix=".write-test-")
        os.close(handle)
        os.unlink(probe)
    except OSError as error:
        reason = error.strerror or str(error)
        raise RunDirError(f"{key}={directory} is not writable ({reason}) — point {key} at a writable dir"
                          + (", or set trainer.save_freq=0 to save no checkpoints"
                             if key == "trainer.checkpoint_dir" else "")) from None


def _create_with(lock: Path, owner: str) -> bool:
    """Create `lock` holding `owner`, atomically: a hard link either makes the complete file or fails, so
    nobody ever reads a lock that is created but not yet written."""
    handle, draft = tempfile.mkstemp(dir=lock.parent, prefix=f"{LOCK_NAME}.")
    try:
        with os.fdopen(handle, "w") as file:
            file.write(owner + "\n")
        os.link(draft, lock)
        return True
    except FileExistsError:
        return False
    finally:
        os.unlink(draft)


def _read_owner(lock: Path) -> tuple[int | None, str]:
    try:
        pid, _, host = lock.read_text().strip().partition(" ")
        return int(pid), host
    except (OSError, ValueError):  # gone, or not a lock this code wrote
        return None, "?"


def _running(pid: int | None, host: str) -> bool:
    if pid is None:
        return False
    if host != socket.gethostname():
        return True  # another node's process: this one cannot tell, so it does not take the lock
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except OSError as error:
        return error.errno == errno.EPERM  # exists, but belongs to another user
    return True
