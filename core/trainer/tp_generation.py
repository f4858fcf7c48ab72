"""A step's generation under tensor-parallel training (`actor.tensor_parallel_size` > 1, torchrun).

The ranks of one tp group train on the same rows, so each used to generate the group's whole batch with the same
seed: the same work tp times over (the 8B GRPO row at tensor_parallel_size=2 in results/scale: generation 24.4 s
against 12–16 s without tensor parallelism). Here each rank generates its share of the prompts, with a seed of its
own, and the group gathers the shares back in prompt order, so every rank ends with the same batch as before,
sampled once.

Only under `trainer.schedule=sync`: the off-policy schedules generate on a rollout thread beside the update,
whose collectives would interleave with the gather, so there every rank still generates the whole batch.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch.distributed as dist

from core.batch import Batch
from core.engine.distributed import World
from core.rollout.base import SamplingParams, concat_rollouts
from core.trainer.schedule import SyncSchedule


def prompt_shares(prompts: Batch, size: int) -> list[np.ndarray]:
    """The rows of `prompts` each of `size` ranks generates: contiguous, in order, sizes differing by at most 1."""
    return np.array_split(np.arange(len(prompts)), size)


def share_params(params: SamplingParams, size: int, rank: int) -> SamplingParams:
    """A rank's sampling for its share: a seed of its own (seed · size + rank: distinct for distinct step seeds),
    so the shares sample apart and a rerun samples alike; unseeded stays unseeded."""
    return params if params.seed is None else replace(params, seed=params.seed * size + rank)


class TensorParallelGeneration:
    """Generate a tp group's batch once across the group: each rank its share, then an all-gather in order."""

    def __init__(self, world: World, pad_token_id: int):
        tp = world.mesh["tp"]
        self.size, self.rank, self.group = tp.size(), tp.get_local_rank(), tp.get_group()
        self.pad_token_id = pad_token_id

    @staticmethod
    def applies(world: World, schedule: str) -> bool:
        """Whether this rank's generation is split over its tp group (see the module's docstring)."""
        return world.mesh is not None and world.mesh["tp"].size() > 1 and schedule == SyncSchedule.name

    def generate(self, generate, prompts: Batch, params: SamplingParams) -> Batch:
        """`generate(prompts, params)` (a rollout backend's) on this rank's share; the group's batch back."""
        if len(prompts) < self.size:  # a share would be empty: not worth a collective
            return generate(prompts, params)
        share = prompt_shares(prompts, self.size)[self.rank]
        own = generate(prompts.select(share), share_params(params, self.size, self.rank))
        gathered: list[Batch | None] = [None] * self.size
        dist.all_gather_object(gathered, own, group=self.group)
        return concat_rollouts(gathered, self.pad_token_id)
