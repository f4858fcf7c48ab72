"""Where a rank's rollout engine lives when training runs as several ranks (torchrun or Ray workers).

SPMD, as verl and TRL run vLLM under torchrun: every rank builds one engine worker on its own GPU
(`LOCAL_RANK`), and `rollout.tensor_model_parallel_size` = k consecutive ranks form one engine, so a
world of N ranks holds N / k engines that generate independently. The k ranks of one engine must
submit the same requests in lockstep; each rank brings its own prompts, so they pool them first
and each keeps its own rows of the result.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch.distributed as dist


@dataclass
class EnginePlacement:
    rank: int
    world_size: int
    tensor_parallel_size: int
    group: object = field(default=None, repr=False)  # gloo group of this engine's ranks (tp > 1)

    @classmethod
    def current(cls, tensor_parallel_size: int) -> "EnginePlacement":
        """This process's placement in the default process group (one rank when there is none)."""
        distributed = dist.is_initialized()
        rank = dist.get_rank() if distributed else 0
        world_size = dist.get_world_size() if distributed else 1
        if world_size == 1:  # one process: an engine of several GPUs runs its own workers (not SPMD)
            return cls(rank, world_size, tensor_parallel_size)
        check_engine_split(tensor_parallel_size, world_size)
        placement = cls(rank, world_size, tensor_parallel_size)
        if tensor_parallel_size > 1:
            # new_group is collective over the whole world: every rank creates every engine's group.
            for first in range(0, world_size, tensor_parallel_size):
                group = dist.new_group(list(range(first, first + tensor_parallel_size)), backend="gloo")
                if first == placement.engine_index * tensor_parallel_size:
                    placement.group = group
        return placement

    @property
    def engine_index(self) -> int:
        """Which engine this rank belongs to: engines sample with different seeds, their ranks alike."""
        return self.rank // self.tensor_parallel_size

    @property
    def spmd(self) -> bool:
        """Several ranks: each builds its engine worker from torchrun's environment (vLLM's external launcher)."""
        return self.world_size > 1

    def pool_prompts(self, prompts: list[list[int]], seed: int | None) -> tuple[list[list[int]], slice, int | None]:
        """(the prompts this rank's engine generates, the slice of them that are this rank's own, the
        sampling seed they share: the engine's first rank's, so its workers sample alike).

        Ranks of one engine that already hold the same prompts (tensor-parallel training shares data
        within a tp group) submit them once."""
        if self.tensor_parallel_size == 1 or not self.spmd:
            return prompts, slice(0, len(prompts)), seed
        gathered: list[tuple[list[list[int]], int | None]] = [None] * self.tensor_parallel_size
        dist.all_gather_object(gathered, (prompts, seed), group=self.group)
        lead_seed = gathered[0][1]
        if all(part == gathered[0][0] for part, _ in gathered):
            return prompts, slice(0, len(prompts)), lead_seed
        own = self.rank % self.tensor_parallel_size
        start = sum(len(part) for part, _ in gathered[:own])
        pooled = [ids for part, _ in gathered for ids in part]
        return pooled, slice(start, start + len(prompts)), lead_seed


def check_engine_split(tensor_parallel_size: int, world_size: int) -> None:
    """Fail before any engine starts when the ranks cannot split into whole engines."""
    if tensor_parallel_size < 1 or world_size % tensor_parallel_size:
        raise ValueError(f"rollout.tensor_model_parallel_size={tensor_parallel_size} must be ≥ 1 and divide the "
                         f"number of ranks ({world_size}): each engine spans that many ranks (GPUs)")
