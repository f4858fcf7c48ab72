"""Room on disk for a checkpoint: checked before a save starts, and named when a save runs out of it.

Without this, a full disk ends a run in torch's `[enforce fail at inline_container.cc] unexpected pos`,
which names neither the disk nor the file. The size a checkpoint needs is at least the bytes of its
tensors (weights, optimizer moments); its small files (config, tokenizer, zip headers) come on top,
so a save can still run out of room after the check passed: `is_out_of_space` tells that failure
from others, so the caller can remove the partial save and report it the same way.
"""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

import torch

from core.trainer.stops import RunHalted

OUT_OF_SPACE_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


class DiskFullError(RunHalted):
    """A checkpoint did not fit on its disk; the message names the dir, the bytes needed and free."""


def state_bytes(state) -> int:
    """Bytes of the tensors in a nested dict/list/tuple of states."""
    if isinstance(state, torch.Tensor):
        return state.numel() * state.element_size()
    if isinstance(state, dict):
        return sum(state_bytes(value) for value in state.values())
    if isinstance(state, (list, tuple)):
        return sum(state_bytes(value) for value in state)
    return 0


def free_bytes(directory: Path) -> int:
    return shutil.disk_usage(directory).free


def is_out_of_space(error: BaseException, directory: Path, needed: int) -> bool:
    """Whether a failed save failed for lack of room. torch's zip writer reports a failed write as a
    RuntimeError without an errno: that counts when the disk now has less room than the checkpoint."""
    if isinstance(error, OSError):
        return error.errno in OUT_OF_SPACE_ERRNOS
    return isinstance(error, RuntimeError) and free_bytes(directory) < needed


def disk_full_message(target: Path, step: int, needed: int, free: int, latest: Path | None, midway: bool) -> str:
    """`free`: the room when the save started; `midway`: the save ran out of room while writing."""
    what = (f"ran out of room while writing: its tensors alone need {_size(needed)}, and {_size(free)} were free "
            "when it started" if midway else f"needs at least {_size(needed)}, and only {_size(free)} are free")
    kept = f"the latest checkpoint is still {latest}" if latest else "there is no earlier checkpoint"
    return (f"disk full: the checkpoint of step {step} ({target}) {what} on that disk — free some space or point "
            f"trainer.checkpoint_dir at a larger disk; no partial save was left behind, and {kept}")


def _size(count: int) -> str:
    return f"{count:,} bytes ({count / 2**20:.1f} MiB)"
