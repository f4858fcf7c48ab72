"""What a resumed run continues, said before anything is built: the checkpoint, and how the config changed.

Rank 0 picks and verifies the checkpoint (hashing its files once, not once per rank) and tells the other
ranks. The checkpoint holds the config that wrote it; every key that differs now is listed
(`key: checkpoint value → new value`), and a key a resume cannot honour (`FROZEN_ON_RESUME`) is refused
as a config error, before a model is built or an MLflow run reopened. Every other key takes its new
value: `trainer.total_steps`, `save_freq` and `test_freq` are read as the loop runs, and the engines
apply the new `lr`, betas and weight decay over the checkpoint's optimizer state (`FSDPEngine`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch.distributed as dist
from omegaconf import OmegaConf

from core.config import ConfigError
from core.engine.distributed import World
from core.trainer.checkpoint import CheckpointError, read_trainer_state, resolve_resume

_SAME_DATA = "the checkpoint's data position is a place in the data order these keys fix"
FROZEN_ON_RESUME = {  # key -> why a resume cannot take a new value
    "data.train_batch_size": "the checkpoint's data position counts batches of this size",
    "data.train_files": _SAME_DATA,
    "data.shuffle": _SAME_DATA,
    "trainer.seed": _SAME_DATA,
    "model.path": "the checkpoint holds weights of that model",
    "model.init": "the checkpoint holds weights of that model",
    "actor.lora.rank": "the checkpoint's adapters have that shape",
    "actor.lora.target_modules": "the checkpoint's adapters sit on those modules",
    "critic.model_path": "the checkpoint holds the critic of that model",
}
NOT_COMPARED = ("trainer.resume",)  # differs in every resume
LOADER_KEYS = {"seed": "trainer.seed", "shuffle": "data.shuffle", "batch_size": "data.train_batch_size"}


@dataclass(frozen=True)
class Resume:
    path: Path
    step: int
    mlflow_run_id: str | None
    loader: dict  # the checkpoint's data position (PromptLoader.state_dict)


def plan_resume(config, world: World) -> Resume | None:
    """On every rank: the checkpoint `trainer.resume` names (None: a fresh run), decided on rank 0."""
    return decided_on_main(world, lambda: _plan(config))


def _plan(config) -> Resume | None:
    trainer = config.trainer
    path = resolve_resume(trainer.resume, Path(trainer.checkpoint_dir))
    if path is None:
        if trainer.resume == "auto":
            print(f"note: trainer.resume=auto found no checkpoint under {trainer.checkpoint_dir}; this run starts "
                  "fresh", flush=True)
        return None
    state = read_trainer_state(path)
    check_config_changes(state.get("config"), OmegaConf.to_container(config, resolve=True), path)
    return Resume(path, int(state["step"]), state.get("mlflow_run_id"), state["loader"])


def check_config_changes(saved: dict | None, now: dict, path: Path) -> None:
    """List what differs from the checkpoint's config; refuse a change a resume cannot honour."""
    if saved is None:
        print(f"note: {path} was written before checkpoints held their config; changes to it cannot be listed",
              flush=True)
        return
    before, after = _flat(saved), _flat(now)
    changed = [key for key in sorted(before.keys() | after.keys())
               if key not in NOT_COMPARED and before.get(key) != after.get(key)]
    for key in changed:
        if key in FROZEN_ON_RESUME:
            raise ConfigError(f"{key}={after.get(key)!r} but the checkpoint {path} was written with "
                              f"{key}={before.get(key)!r} — {FROZEN_ON_RESUME[key]}; resume with {key}="
                              f"{before.get(key)}, or start a new run (trainer.resume=disable)")
    if changed:
        lines = [f"  {key}: {before.get(key, '(absent)')} → {after.get(key, '(absent)')}" for key in changed]
        print("\n".join([f"resuming {path} with a changed config (checkpoint → this run):", *lines]), flush=True)


def check_data_position(loader_now: dict, resume: Resume) -> None:
    """The data the checkpoint's position points into must be this run's (`PromptLoader.state_dict`s): this
    also covers checkpoints written before they held their config."""
    for field, key in LOADER_KEYS.items():
        if field in resume.loader and resume.loader[field] != loader_now[field]:
            raise ConfigError(f"{key} gives a data loader with {field}={loader_now[field]!r}, but the checkpoint "
                              f"{resume.path} was written with {field}={resume.loader[field]!r} — resume with the "
                              f"same {key}")
    saved, size = resume.loader.get("dataset_size"), loader_now["dataset_size"]
    if saved is not None and saved != size:
        raise ConfigError(f"the training data has {size} prompts but the checkpoint {resume.path} was written over "
                          f"{saved} — resume with the same data.train_files (and, with data.truncation=filter, the "
                          "same data.max_prompt_length)")


def decided_on_main(world: World, decide: Callable):
    """`decide()` on rank 0 alone, and its result, or its error, on every rank."""
    outcome = (None, None)
    if world.is_main:
        try:
            outcome = (decide(), None)
        except (CheckpointError, ConfigError) as error:
            outcome = (None, error)
    if world.size > 1:
        box = [outcome]
        dist.broadcast_object_list(box, src=0)
        outcome = box[0]
    result, error = outcome
    if error is not None:
        raise error
    return result


def _flat(tree: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat
