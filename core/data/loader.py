"""An endless, seeded, resumable stream of prompt batches, sharded over data-parallel ranks.

The order is a pure function of (seed, epoch): epoch e permutes with
`torch.Generator().manual_seed(seed + e)`. So the loader's whole state is (epoch, offset), and
`load_state_dict` of a checkpoint puts a resumed run on exactly the batch the original run would
have drawn next; that is what makes exact resume possible.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch

from core.batch import Batch
from core.data.dataset import PromptItem, collate_prompts


class PromptLoader:
    """Iterate forever over epochs; each `next()` is this rank's share of one global batch.

    A global batch of `batch_size` prompts is cut into `world_size` contiguous equal parts and rank
    r gets part r, so the ranks together see every prompt of the global batch exactly once.
    `batch_size_key` only names the config key in error messages.
    """

    def __init__(
        self,
        dataset: Sequence[PromptItem],
        batch_size: int,
        *,
        seed: int,
        shuffle: bool = True,
        drop_last: bool = True,
        rank: int = 0,
        world_size: int = 1,
        pad_token_id: int | None = None,
        batch_size_key: str = "data.train_batch_size",
        collate: Callable[[list, int], Batch] = collate_prompts,
    ):
        self.dataset = dataset
        self.batch_size = batch_size
        self.seed = seed
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.rank = rank
        self.world_size = world_size
        self.pad_token_id = dataset.pad_token_id if pad_token_id is None else pad_token_id
        self.collate = collate  # items -> Batch: prompts to generate from, or SFT examples (collate_sft)
        self._validate(batch_size_key)
        self.epoch = 0
        self.offset = 0  # prompts of this epoch's order already served (all ranks together)
        self._order_epoch: int | None = None
        self._order: list[int] = []

    def __len__(self) -> int:
        """Global batches per epoch."""
        full, rest = divmod(len(self.dataset), self.batch_size)
        return full if self.drop_last or not rest else full + 1

    def __iter__(self) -> "PromptLoader":
        return self

    def __next__(self) -> Batch:
        order = self._epoch_order(self.epoch)
        global_indices = order[self.offset : self.offset + self.batch_size]
        share = len(global_indices) // self.world_size
        mine = global_indices[self.rank * share : (self.rank + 1) * share]
        meta = {"epoch": self.epoch, "batch_in_epoch": self.offset // self.batch_size}
        self._advance(len(global_indices))
        batch = self.collate([self.dataset[i] for i in mine], self.pad_token_id)
        batch.meta.update(meta)
        return batch

    # ---- resume -------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {
            "epoch": self.epoch,
            "offset": self.offset,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "batch_size": self.batch_size,
            "dataset_size": len(self.dataset),
        }

    def load_state_dict(self, state: dict) -> None:
        # A different seed, shuffle, batch size or dataset would make "the same next batch" a lie;
        # refuse rather than resume into a silently different data order.
        now = self.state_dict()
        for key in ("seed", "shuffle", "batch_size", "dataset_size"):
            if key in state and state[key] != now[key]:
                raise ValueError(
                    f"PromptLoader.load_state_dict: the checkpoint was written with {key}={state[key]}, "
                    f"this run has {key}={now[key]}; resume with the same data and settings, or start a new run"
                )
        self.epoch = int(state["epoch"])
        self.offset = int(state["offset"])

    # ---- internals ----------------------------------------------------------------------------
    def _epoch_order(self, epoch: int) -> list[int]:
        if self._order_epoch != epoch:
            n = len(self.dataset)
            if self.shuffle:
                generator = torch.Generator().manual_seed(self.seed + epoch)
                self._order = torch.randperm(n, generator=generator).tolist()
            else:
                self._order = list(range(n))
            self._order_epoch = epoch
        return self._order

    def _advance(self, n_served: int) -> None:
        # Roll over eagerly, so a state_dict taken after an epoch's last batch already says
        # (epoch + 1, 0) rather than pointing at an empty tail.
        self.offset += n_served
        if self.offset >= len(self) * self.batch_size or self.offset >= len(self.dataset):
            self.epoch += 1
            self.offset = 0

    def _validate(self, key: str) -> None:
        n, size, world = len(self.dataset), self.batch_size, self.world_size
        if size <= 0:
            raise ValueError(f"{key}={size}; it must be a positive number of prompts")
        if not 0 <= self.rank < world:
            raise ValueError(f"PromptLoader: rank={self.rank} is outside world_size={world}")
        if size % world:
            raise ValueError(
                f"{key}={size} must be divisible by the data-parallel world size {world}, "
                f"so every rank gets the same number of prompts; use a multiple of {world}"
            )
        if self.drop_last and n < size:
            raise ValueError(f"{key}={size} but the dataset has only {n} prompts; lower {key} or add prompts")
        if not self.drop_last and (n % size) % world:
            raise ValueError(
                f"the last batch of an epoch has {n % size} prompts ({n} prompts, {key}={size}), which does not "
                f"split over {world} ranks; set drop_last=True"
            )
