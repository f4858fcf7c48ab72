"""Process-group and device-mesh setup shared by the local controller (1 process or torchrun) and Ray
workers: the lowest layer of the engine, below the sharding code (`sharding`, `tp`, `fsdp`)."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh


@dataclass(frozen=True)
class World:
    """This process's place: global rank/size, and its data-parallel coordinates. Without tensor
    parallelism dp_rank/dp_size are rank/size; with it, the tp ranks of one dp group share data."""

    rank: int
    size: int
    device: torch.device
    dp_rank: int = -1  # -1: same as rank
    dp_size: int = -1
    tp_rank: int = 0
    mesh: object = None  # a 2-D ("dp", "tp") DeviceMesh under tensor parallelism
    dp_group: object = None  # None: the default group

    def __post_init__(self):
        if self.dp_rank < 0:
            object.__setattr__(self, "dp_rank", self.rank)
            object.__setattr__(self, "dp_size", self.size)

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def with_tensor_parallel(world: World, tensor_parallel_size: int) -> World:
    """`world` split into a ("dp", "tp") mesh; the identity for tensor_parallel_size=1."""
    if tensor_parallel_size == 1:
        return world
    mesh = build_mesh(world.size, tensor_parallel_size, world.device.type)
    return World(world.rank, world.size, world.device, dp_rank=mesh["dp"].get_local_rank(),
                 dp_size=mesh["dp"].size(), tp_rank=mesh["tp"].get_local_rank(), mesh=mesh,
                 dp_group=mesh["dp"].get_group())


def build_mesh(world_size: int, tensor_parallel_size: int, device_type: str) -> DeviceMesh:
    """A (dp, tp) mesh; tp is innermost so a tp group is consecutive ranks (one node's fast links)."""
    if tensor_parallel_size < 1 or world_size % tensor_parallel_size:
        raise ValueError(
            f"actor.tensor_parallel_size={tensor_parallel_size} must be >= 1 and divide the number of "
            f"training processes ({world_size}); the rest form data-parallel groups of that size")
    if dist.is_initialized() and dist.get_world_size() != world_size:
        raise ValueError(f"build_mesh(world_size={world_size}) but the process group has "
                         f"{dist.get_world_size()} ranks")
    return init_device_mesh(device_type, (world_size // tensor_parallel_size, tensor_parallel_size),
                            mesh_dim_names=("dp", "tp"))


def init_distributed(device: str = "auto") -> World:
    """Join torchrun's group when launched by it, else a one-rank group (FSDP2 needs a mesh)."""
    resolved = torch.device("cuda" if device == "auto" and torch.cuda.is_available() else
                            ("cpu" if device == "auto" else device))
    if resolved.type == "cuda":
        local_rank = int(os.environ.get("LOCAL_RANK", 0))
        resolved = torch.device("cuda", local_rank)
        torch.cuda.set_device(resolved)
    if not dist.is_initialized():
        # On GPUs, gloo beside NCCL for CPU tensors: with actor.cpu_offload the shards, gradients and their
        # norms live in host memory, and their collectives (gradient clipping) run there.
        backend = "cpu:gloo,cuda:nccl" if resolved.type == "cuda" else "gloo"
        if "WORLD_SIZE" in os.environ:
            dist.init_process_group(backend=backend)
        else:
            dist.init_process_group(backend=backend, store=dist.HashStore(), rank=0, world_size=1)
    return World(rank=dist.get_rank(), size=dist.get_world_size(), device=resolved)


def _all_reduce_scalar(value: float | torch.Tensor, device: torch.device, op, group) -> float:
    tensor = torch.as_tensor(value, dtype=torch.float64, device=device).clone()
    if dist.is_initialized() and dist.get_world_size(group) > 1:
        dist.all_reduce(tensor, op=op, group=group)
    return tensor.item()


def all_reduce_sum(value: float | torch.Tensor, device: torch.device, group=None) -> float:
    return _all_reduce_scalar(value, device, dist.ReduceOp.SUM, group)


def all_reduce_max(value: float | torch.Tensor, device: torch.device, group=None) -> float:
    return _all_reduce_scalar(value, device, dist.ReduceOp.MAX, group)


def all_reduce_mean(metrics: dict[str, float], device: torch.device) -> dict[str, float]:
    """Mean of each metric over ranks (every rank holds an equal share of the batch)."""
    if not (dist.is_initialized() and dist.get_world_size() > 1) or not metrics:
        return dict(metrics)
    keys = sorted(metrics)
    tensor = torch.tensor([float(metrics[k]) for k in keys], dtype=torch.float64, device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    tensor /= dist.get_world_size()
    return dict(zip(keys, tensor.tolist()))


def all_gather_object(obj) -> list:
    """[rank 0's obj, rank 1's obj, …] on every rank (picklable objects; for small results)."""
    if not (dist.is_initialized() and dist.get_world_size() > 1):
        return [obj]
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, obj)
    return gathered
