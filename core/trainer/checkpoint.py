"""Checkpoints: everything a run needs to continue exactly, written so a crash never breaks one.

    <trainer.checkpoint_dir>/
      global_step_40/
        trainer_state.pt        step, data position, RNG states of every rank, val history, MLflow run
        actor/model.pt          unsharded weights (fp32 master copy); with LoRA the adapters alone
        actor/lora.pt           LoRA only: rank, alpha, target modules and the base model they apply to
        actor/optimizer.pt      unsharded AdamW state
        actor/scheduler.pt      lr schedule
        actor/hf/               config + tokenizer: `recipezoo merge` turns this dir into a HF model
        critic/...              PPO only
        SHA256SUMS              a checksum per file (`sha256sum -c` reads it), verified before a resume
      latest_checkpointed_iteration.txt   "40" (verl's name, so tools that read it work)

Atomicity: rank 0 writes into `.tmp-global_step_N`, fsyncs every file, and only then renames it to
`global_step_N` (a rename is atomic on POSIX) and rewrites the pointer file by rename too. A crash
at any point leaves the previous checkpoint and the pointer intact; stale `.tmp-*` dirs are never
read and are removed by the next save. A save that runs out of disk removes its `.tmp-*` dir at once
and stops the run naming the bytes needed and free (`disk_space.py`).

Trust: a checkpoint is verified before it loads, against its checksums (a flipped bit), or for one
written before checksums, by opening each torch file's zip index (a truncated copy). `trainer.resume=auto`
skips a corrupt checkpoint for the newest valid one, with a note; a named one that fails is refused.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import zipfile
from pathlib import Path

import numpy as np
import torch

from core.engine.distributed import World, all_gather_object
from core.trainer.checksums import first_mismatch, has_checksums, write_checksums
from core.trainer.disk_space import DiskFullError, disk_full_message, free_bytes, is_out_of_space, state_bytes

STEP_DIR = re.compile(r"global_step_(\d+)")
LATEST_FILE = "latest_checkpointed_iteration.txt"
TRAINER_STATE = "trainer_state.pt"
FORMAT_VERSION = 1
ENGINE_FILES = ("model", "optimizer", "scheduler", "lora")


class CheckpointError(RuntimeError):
    pass


def step_dir_name(step: int) -> str:
    return f"global_step_{step}"


def list_checkpoints(root: Path) -> list[tuple[int, Path]]:
    """Complete checkpoints under `root`, oldest first (a `.tmp-*` dir is never complete)."""
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := STEP_DIR.fullmatch(p.name))]
    return sorted((step, path) for step, path in found if (path / TRAINER_STATE).is_file())


def latest_checkpoint(root: Path) -> Path | None:
    """The pointer file's checkpoint if it is complete, else the newest complete one."""
    pointer = root / LATEST_FILE
    text = pointer.read_text().strip() if pointer.is_file() else ""
    if text.isdigit() and (root / step_dir_name(int(text)) / TRAINER_STATE).is_file():
        return root / step_dir_name(int(text))
    complete = list_checkpoints(root)
    return complete[-1][1] if complete else None


def resolve_resume(resume: str | None, root: Path, flag: str = "trainer.resume") -> Path | None:
    """`trainer.resume`: disable (or null) -> None; auto -> the newest valid checkpoint under `root` or None;
    a path -> that checkpoint (a `global_step_N` dir, or a checkpoint root: its latest), which must be valid.
    `flag`: what the user set it with, as the hints name it (`recipezoo rm` has `--resume`)."""
    if resume in (None, "", "disable"):
        return None
    if resume == "auto":
        return newest_valid_checkpoint(root, flag)
    found = find_checkpoint(Path(resume).expanduser(), flag, f"`auto` (latest under {root}), `disable`")
    verify_checkpoint(found, flag)
    return found


def newest_valid_checkpoint(root: Path, flag: str = "trainer.resume") -> Path | None:
    """The latest checkpoint, or when it is corrupt the newest earlier one that is valid, each skipped one
    noted in a line. All corrupt: the newest one's error (resuming from nothing would be a silent restart)."""
    latest = latest_checkpoint(root)
    if latest is None:
        return None
    latest_step = int(STEP_DIR.fullmatch(latest.name).group(1))
    candidates = [latest] + [path for step, path in reversed(list_checkpoints(root)) if step < latest_step]
    for path in candidates:
        try:
            verify_checkpoint(path, flag)
        except CheckpointError as error:
            if path is candidates[-1]:
                raise
            problem = str(error).split(" — ")[0]
            print(f"note: {problem}; {flag}=auto skips {path.name} for an earlier checkpoint", flush=True)
            continue
        if path is not latest:
            print(f"note: resuming from {path}, the newest valid checkpoint", flush=True)
        return path
    return None


def verify_checkpoint(path: Path, flag: str = "trainer.resume") -> None:
    """Every file must be as it was saved: one that fails its checksum (a flipped bit) or, in a checkpoint
    written before checksums, a truncated torch file (a full disk, a copy cut short) fails here, before any
    model loads, naming the file and the checkpoint to fall back to.

    Without checksums: a torch.save file is a zip archive whose index sits at its very end, so opening it
    reads only the index and catches truncation without reading the weights.
    """
    if has_checksums(path):
        problem = first_mismatch(path)
        if problem:
            raise CheckpointError(f"{problem} — {_fallback_hint(path, flag)}")
        return
    for file in sorted(path.rglob("*.pt")):
        try:
            with zipfile.ZipFile(file):
                pass
        except (zipfile.BadZipFile, OSError) as error:
            raise CheckpointError(f"{file} is truncated or corrupt ({error}) — {_fallback_hint(path, flag)}") from None


def _fallback_hint(bad: Path, flag: str) -> str:
    match = STEP_DIR.fullmatch(bad.name)
    step = int(match.group(1)) if match else None
    earlier = [path for other, path in list_checkpoints(bad.parent) if step is None or other < step]
    if earlier:
        return f"resume from the previous checkpoint with {flag}={earlier[-1]} (or delete {bad})"
    return f"no earlier checkpoint under {bad.parent}: start fresh with {flag}=disable"


def find_checkpoint(path: Path, what: str, alternatives: str = "") -> Path:
    """`path` itself when it is a complete `global_step_N` dir, else the latest checkpoint under it."""
    if (path / TRAINER_STATE).is_file():
        return path
    latest = latest_checkpoint(path) if path.is_dir() else None
    if latest is None:
        found = "does not exist" if not path.exists() else f"has no {TRAINER_STATE} and no complete global_step_N dir"
        raise CheckpointError(f"{what}={str(path)!r}: {found}; pass a global_step_N dir or a checkpoint dir"
                              + (f", or {alternatives}" if alternatives else ""))
    return latest


def read_trainer_state(path: Path) -> dict:
    state = torch.load(path / TRAINER_STATE, weights_only=True)
    if state.get("format") != FORMAT_VERSION:
        raise CheckpointError(f"{path / TRAINER_STATE}: checkpoint format {state.get('format')!r}, "
                              f"this recipezoo reads format {FORMAT_VERSION}")
    return state


class CheckpointManager:
    """Save and load the engines plus the trainer state; every method is collective over ranks."""

    def __init__(self, root: str | Path, world: World, keep_last: int = 0):
        self.root, self.world, self.keep_last = Path(root), world, keep_last

    def save(self, step: int, engines: dict, trainer_state: dict, hf_files: dict) -> Path:
        """`engines`: role -> FSDPEngine; `hf_files`: role -> callable(dir) writing config + tokenizer."""
        engine_states = {role: engine.checkpoint_state() for role, engine in engines.items()}
        rng_states = all_gather_object(capture_rng_state())
        final, disk_full = self.root / step_dir_name(step), None
        if self.world.is_main:
            full_state = {**trainer_state, "format": FORMAT_VERSION, "step": step, "rng": rng_states,
                          "world_size": self.world.size, "roles": sorted(engines)}
            disk_full = self._write(final, engine_states, full_state, hf_files)
        # Every rank learns whether the save failed, so all stop together; and nobody runs ahead (and maybe
        # crashes) before the checkpoint is final.
        disk_full = all_gather_object(disk_full)[0]
        if disk_full:
            raise DiskFullError(disk_full)
        return final

    def _write(self, final: Path, engine_states: dict, full_state: dict, hf_files: dict) -> str | None:
        """Rank 0: write `final` through its `.tmp-` dir; the disk-full message when it did not fit."""
        tmp, step, latest = self.root / f".tmp-{final.name}", full_state["step"], latest_checkpoint(self.root)
        shutil.rmtree(tmp, ignore_errors=True)
        self.root.mkdir(parents=True, exist_ok=True)
        needed, free = state_bytes(engine_states), free_bytes(self.root)
        if free < needed:
            return disk_full_message(final, step, needed, free, latest, midway=False)
        try:
            for role, state in engine_states.items():
                for name in ENGINE_FILES:
                    if name in state:
                        _save_synced(state[name], tmp / role / f"{name}.pt")
                hf_files[role](tmp / role / "hf")
            _save_synced(full_state, tmp / TRAINER_STATE)
            write_checksums(tmp)  # last: it covers every file
        except (OSError, RuntimeError) as error:
            out_of_space = is_out_of_space(error, self.root, needed)  # before the removal frees the space again
            shutil.rmtree(tmp, ignore_errors=True)  # a partial save must not keep the disk full
            if out_of_space:
                return disk_full_message(final, step, needed, free, latest, midway=True)
            raise
        _replace_dir(tmp, final)
        _write_atomic(self.root / LATEST_FILE, str(step))
        self._prune()
        return None

    def load(self, path: Path, engines: dict) -> dict:
        """Restore the engines and this rank's RNG state; returns the trainer state."""
        state = read_trainer_state(path)
        missing = sorted(set(engines) - set(state["roles"]))
        if missing:
            raise CheckpointError(f"{path} has no state for {missing} (it holds {state['roles']}); "
                                  "resume with the recipe that wrote it")
        if state["world_size"] != self.world.size:
            raise CheckpointError(f"{path} was written by {state['world_size']} ranks, this run has "
                                  f"{self.world.size}; exact resume needs the same number of ranks")
        for role, engine in engines.items():
            engine.load_checkpoint(path / role)
        restore_rng_state(state["rng"][self.world.rank])
        return state

    def _prune(self) -> None:
        for stale in self.root.glob(".tmp-*"):
            shutil.rmtree(stale, ignore_errors=True)
        complete = list_checkpoints(self.root)
        if self.keep_last > 0:
            for _, path in complete[: -self.keep_last]:
                shutil.rmtree(path, ignore_errors=True)


def capture_rng_state() -> dict:
    """Python, NumPy, torch CPU and CUDA generators, as types `torch.load(weights_only=True)` reads."""
    np_state = np.random.get_state()
    state = {"python": random.getstate(), "torch": torch.get_rng_state(),
             "numpy": [np_state[0], np_state[1].tolist(), *np_state[2:]]}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def restore_rng_state(state: dict) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def _save_synced(obj, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as handle:
        torch.save(obj, handle)
        handle.flush()
        os.fsync(handle.fileno())


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _replace_dir(tmp: Path, final: Path) -> None:
    """Rename `tmp` to `final`; an existing `final` (the same step saved again) is moved aside first."""
    _fsync_tree(tmp)
    old = final.with_name(f".tmp-old-{final.name}")
    if final.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.replace(final, old)
    os.replace(tmp, final)
    _fsync_dir(final.parent)
    shutil.rmtree(old, ignore_errors=True)


def _fsync_tree(root: Path) -> None:
    """Files written by others (`save_pretrained`) reach the disk before the rename publishes them."""
    for path in [root, *root.rglob("*")]:
        if path.is_dir():
            _fsync_dir(path)
        else:
            with open(path, "rb") as handle:
                os.fsync(handle.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
