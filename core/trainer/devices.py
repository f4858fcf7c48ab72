"""The GPUs a launch needs, against those this node has: one line before any process group, Ray cluster or
engine starts (issue 38: "a placement or GPU split the node cannot hold").

`recipezoo train` runs it with the cheap checks (preflight.py); the dry run does not, since it plans for a
machine that need not be this one. Only what this node decides is checked here: torchrun's ranks on it, and
a local Ray cluster (RAY_ADDRESS unset), which is this node. A cluster at RAY_ADDRESS is checked once
connected, before any worker starts (ray_controller.check_cluster_fits).
"""

from __future__ import annotations

import os
import sys

import torch

from core.config import ConfigError


def check_devices(config) -> None:
    trainer = config.trainer
    available = torch.cuda.device_count()  # 0 on a CPU build; asks NVML, so CUDA is not initialised here
    if trainer.controller == "ray" and (os.environ.get("RAY_ADDRESS", "local") != "local" or _ray_connected()):
        return  # the cluster's nodes hold the devices, not this one: Ray's own count decides
    if trainer.device == "cuda" and not available:
        raise ConfigError(f"trainer.device=cuda but torch sees no GPU on this node ({_why_no_gpu()}) — run on a "
                          "GPU machine, or set trainer.device=auto to run on the CPU")
    if trainer.device == "cpu" or not available:
        return
    if trainer.controller == "ray":
        check_local_ray_cluster(trainer, available)
    elif "LOCAL_WORLD_SIZE" in os.environ:
        local_ranks = int(os.environ["LOCAL_WORLD_SIZE"])  # each takes cuda:LOCAL_RANK
        if local_ranks > available:
            raise ConfigError(f"torchrun's --nproc-per-node={local_ranks} ranks on this node need a GPU each, and "
                              f"torch sees {available} — start torchrun with --nproc-per-node={available} or less")


def check_local_ray_cluster(trainer, available: int) -> None:
    """Every Ray worker takes one GPU; disaggregated rollout workers take theirs beside the training ranks."""
    ranks = trainer.nnodes * trainer.n_gpus_per_node
    need, wanted = f"trainer.nnodes × trainer.n_gpus_per_node = {ranks} training ranks", ranks
    if trainer.placement == "disaggregated":
        need, wanted = f"{need} + trainer.rollout_workers={trainer.rollout_workers}", ranks + trainer.rollout_workers
    if wanted > available:
        raise ConfigError(f"{need} need {wanted} GPUs, and this node has {available} (RAY_ADDRESS is unset, so the "
                          "Ray cluster is this node) — lower them, or set RAY_ADDRESS to a cluster with more GPUs")


def _ray_connected() -> bool:
    """A Ray cluster this process already joined (a test's, a notebook's): Ray's own count decides."""
    ray = sys.modules.get("ray")  # not imported here: Ray is optional and slow to import
    return ray is not None and ray.is_initialized()


def _why_no_gpu() -> str:
    if torch.version.cuda is None:
        return "a CPU build of torch"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return f"CUDA_VISIBLE_DEVICES={visible!r}" if visible is not None else "no GPU visible to the CUDA build"
