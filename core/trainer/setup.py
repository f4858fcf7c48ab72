"""Build what a trainer needs from a config: process group, model, data, roles, tracking.

Kept out of `BaseTrainer` so the trainer file reads as the algorithm and this one as plumbing. The
roles come from the `build_roles` the trainer passes in (`core.trainer.controllers`): the
controllers sit above this module, which never imports one.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from omegaconf import OmegaConf

from core.data.dataset import PromptDataset
from core.data.loader import PromptLoader
from core.data.sources import resolve_data_files
from core.engine.distributed import World, init_distributed, with_tensor_parallel
from core.engine.sharding import check_checkpoint_layers
from core.models.loading import load_tokenizer
from core.models.warmstart import default_cache_dir
from core.rollout.multi_turn.settings import checked_template, pin_tool_paths
from core.rollout.multi_turn.settings import enabled as multi_turn_enabled
from core.tracking.tracker import Tracking, build_tracking
from core.trainer.checkpoint_export import policy_model_path
from core.trainer.config_checks import check_batch_sizes
from core.trainer.memory_estimate import ModelShape, check_run_fits
from core.trainer.resume import Resume, check_data_position, plan_resume
from core.trainer.seed import seed_everything
from core.trainer.start_record import PREFIX, start_phase
from core.trainer.workers import ActorRolloutRefWorker, CriticWorker


@dataclass
class Components:
    world: World
    tokenizer: object
    train_loader: PromptLoader
    val_dataset: PromptDataset
    actor_rollout: ActorRolloutRefWorker  # or a RayWorkerGroup with the same methods
    critic: CriticWorker | None  # or the Ray group's RayCritic; None for critic-free recipes
    reward_model: object | None  # a RewardModelWorker (or a Ray group's); None without reward.model.path
    judge: object | None  # a JudgeWorker (or the Ray group's RayJudge); None without reward.judge.enable
    tracking: Tracking
    resume_from: Path | None  # the checkpoint `trainer.resume` points at, None: a fresh run
    start_record: dict[str, float]  # seconds per start phase so far (core/trainer/start_record.py)


def host_threads(num_threads: int, cpu_offload: bool, ranks_per_node: int | None,
                 cpu_count: int | None = None) -> int | None:
    """Torch's CPU threads for this process, None: leave torch's default. `trainer.num_threads` when set; with
    `actor.cpu_offload` and several ranks per node (torchrun's, Ray's workers), the node's cores split among
    them: torchrun leaves each rank one thread (OMP_NUM_THREADS=1 where unset), Ray one CPU slot, and the
    offloaded AdamW, whose every step reads and writes each rank's whole shard of weights, gradients and
    moments in host memory, would run on one core."""
    if num_threads:
        return num_threads
    if cpu_offload and ranks_per_node:
        return max(1, (cpu_count or os.cpu_count() or 1) // ranks_per_node)
    return None


def build_components(config, build_roles: Callable, *, with_reference: bool, with_critic: bool) -> Components:
    began = time.perf_counter()
    world, dp_size = start_world(config)
    check_batch_sizes(config, dp_size)
    resume, model_path = prepare_model(config, world)
    check_run_fits(config, model_path, dp_size * config.actor.tensor_parallel_size, with_reference=with_reference,
                   with_critic=with_critic)
    tokenizer = load_tokenizer(model_path, config.model.gguf_file, config.model.trust_remote_code)
    template_kwargs = {}
    if multi_turn_enabled(config.rollout):  # a template that rewrites past turns is refused before any engine starts
        pin_tool_paths(config.rollout.multi_turn)
        template_kwargs = checked_template(config.rollout, tokenizer).template_kwargs
    train_set, val_set = build_datasets(config.data, tokenizer, template_kwargs)
    loader = PromptLoader(train_set, config.data.train_batch_size, seed=config.trainer.seed,
                          shuffle=config.data.shuffle, rank=world.dp_rank, world_size=world.dp_size)
    if resume is not None:
        check_data_position(loader.state_dict(), resume)
    record, roles_record = {PREFIX + "driver_setup": time.perf_counter() - began}, {}
    with start_phase("roles", roles_record):
        roles = build_roles(config, world, model_path, tokenizer, with_reference=with_reference,
                            with_critic=with_critic, num_workers=dp_size)
    for role in (roles.actor_rollout, roles.critic, roles.reward_model, roles.judge):  # the Ray group's: in its record
        record |= getattr(role, "start_record", {})
    record |= roles_record
    tracking = start_tracking(config, world, model_path, resume, record)
    return Components(world, tokenizer, loader, val_set, roles.actor_rollout, roles.critic, roles.reward_model, roles.judge,
                      tracking, resume.path if resume else None, record)


def start_world(config) -> tuple[World, int]:
    """This process's place in the run (torch threads, process group, tensor-parallel groups) and the number of
    data-parallel ranks: Ray's workers under trainer.controller=ray, else the process group's."""
    trainer = config.trainer
    local_ranks = int(os.environ["LOCAL_WORLD_SIZE"]) if "LOCAL_WORLD_SIZE" in os.environ else None  # torchrun's
    threads = host_threads(trainer.num_threads, bool(config.actor.cpu_offload), local_ranks)
    if threads:
        torch.set_num_threads(threads)
    ray_mode = trainer.controller == "ray"
    # Under Ray the driver only orchestrates: a 1-rank CPU group for its own bookkeeping; the
    # workers hold the devices.
    world = init_distributed("cpu" if ray_mode else trainer.device)
    tp = config.actor.tensor_parallel_size
    if ray_mode and tp > 1:
        raise ValueError("actor.tensor_parallel_size > 1 runs under trainer.controller=local (torchrun) only")
    world = with_tensor_parallel(world, tp)
    return world, trainer.nnodes * trainer.n_gpus_per_node if ray_mode else world.dp_size


def prepare_model(config, world: World) -> tuple[Resume | None, str]:
    """The checkpoint a resume continues (a bad one, or a change it cannot take, fails before loading), the seed
    every rank builds identical weights from, and the model dir `model.path` names (a checkpoint's exported)."""
    resume = plan_resume(config, world)
    seed_everything(config.trainer.seed)
    model_path = policy_model_path(config.model.path)
    if config.actor.gradient_checkpointing and config.actor.checkpoint_layers is not None:
        check_checkpoint_layers(config.actor.checkpoint_layers, ModelShape.from_pretrained(
            model_path, config.model.trust_remote_code, config.model.gguf_file).layers)
    return resume, model_path


def start_tracking(config, world: World, model_path: str, resume: Resume | None, record: dict) -> Tracking:
    """The run's trackers, last of the setup: nothing before them left an MLflow run behind. A resumed run
    continues its MLflow run, so the curves before and after the crash are one run."""
    resolved = OmegaConf.to_container(config, resolve=True)
    resolved["model"]["resolved_path"] = model_path
    with start_phase("tracking", record):
        return build_tracking(resolved["tracking"], resolved, config.trainer.seed, config.trainer.total_steps,
                              world.rank, resume_run_id=resume.mlflow_run_id if resume else None,
                              resume_step=resume.step if resume else 0)


def build_datasets(data, tokenizer, template_kwargs: dict | None = None) -> tuple[PromptDataset, PromptDataset]:
    """`template_kwargs`: more arguments for the chat template (a multi-turn run's tool schemas)."""
    common = dict(max_prompt_length=data.max_prompt_length, truncation=data.truncation,
                  prompt_key=data.prompt_key, ground_truth_key=data.ground_truth_key,
                  template_kwargs=template_kwargs)
    train = PromptDataset(data_files(data, "train"), tokenizer, **common)
    val = PromptDataset(data_files(data, "val"), tokenizer, **common)
    if data.val_max_samples:
        val.items = val.items[: data.val_max_samples]
    return train, val


def data_files(data, split: str) -> list[str]:
    """The paths `data.train_files` (split "train") or `data.val_files` ("val") name; embedded
    datasets are written to the cache first. The dry run reads exactly these files too."""
    cache = default_cache_dir() / "data"
    cache.mkdir(parents=True, exist_ok=True)
    return resolve_data_files(data.train_files if split == "train" else data.val_files, split, cache)
