"""The data contract between stages: a `Batch` of tensors sharing dim 0, plus per-sample values.

Every producer's output is validated on entry (`Batch.check`): batch size, dtype and the
response-aligned shapes. A mismatch raises `BatchContractError` naming the producing stage, the
key, the expected and the actual shape, so a bug surfaces at the stage that made it, not three
stages later inside a loss.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np
import torch

# Keys that must be (B, T_resp): they are indexed token by token against `responses`.
RESPONSE_ALIGNED = (
    "responses",
    "response_mask",
    "rollout_log_probs",
    "old_log_probs",
    "ref_log_probs",
    "rollout_is_weights",
    "token_level_scores",
    "token_level_rewards",
    "values",
    "advantages",
    "returns",
)
INTEGER_KEYS = {"input_ids", "attention_mask", "position_ids", "responses", "response_mask", "prompts"}
# Derived, so a new per-token key is listed once: all but the token ids and their mask hold floats.
FLOAT_KEYS = set(RESPONSE_ALIGNED) - INTEGER_KEYS


class BatchContractError(ValueError):
    """A stage produced a batch that breaks the data contract."""


@dataclass
class Batch:
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    # Per-sample values that are not tensors (uid, data_source, ground_truth, ...): numpy object arrays.
    non_tensors: dict[str, np.ndarray] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        self.non_tensors = {k: _as_object_array(v) for k, v in self.non_tensors.items()}

    # ---- access -------------------------------------------------------------------------------
    def __len__(self) -> int:
        for value in self.tensors.values():
            return value.shape[0]
        for value in self.non_tensors.values():
            return len(value)
        return 0

    def __getitem__(self, key: str):
        if key in self.tensors:
            return self.tensors[key]
        if key in self.non_tensors:
            return self.non_tensors[key]
        raise KeyError(f"Batch has no key {key!r}; it has {sorted(self.keys())}")

    def __contains__(self, key: str) -> bool:
        return key in self.tensors or key in self.non_tensors

    def keys(self) -> list[str]:
        return list(self.tensors) + list(self.non_tensors)

    # ---- combining ----------------------------------------------------------------------------
    def union(self, other: "Batch", stage: str = "union") -> "Batch":
        """Add `other`'s keys to a copy of this batch; a key present in both must be equal."""
        if len(self) and len(other) and len(self) != len(other):
            raise BatchContractError(
                f"[{stage}] batch size mismatch: expected {len(self)} rows, got {len(other)}"
            )
        tensors, non_tensors = dict(self.tensors), dict(self.non_tensors)
        for key, value in other.tensors.items():
            if key in tensors and not torch.equal(tensors[key], value):
                raise BatchContractError(f"[{stage}] key {key!r} present in both batches with different values")
            tensors[key] = value
        for key, value in other.non_tensors.items():
            if key in non_tensors and not np.array_equal(non_tensors[key], value):
                raise BatchContractError(f"[{stage}] key {key!r} present in both batches with different values")
            non_tensors[key] = value
        return Batch(tensors, non_tensors, {**self.meta, **other.meta})

    def select(self, index) -> "Batch":
        """Rows by a slice, a list of indices, or a boolean mask."""
        if isinstance(index, torch.Tensor):
            index = index.cpu().numpy()
        if isinstance(index, np.ndarray) and index.dtype == bool:
            index = np.nonzero(index)[0]
        torch_index = index if isinstance(index, slice) else torch.as_tensor(np.asarray(index), dtype=torch.long)
        tensors = {k: v[torch_index] for k, v in self.tensors.items()}
        non_tensors = {k: v[index] for k, v in self.non_tensors.items()}
        return Batch(tensors, non_tensors, dict(self.meta))

    def split(self, chunk_size: int) -> list["Batch"]:
        return [self.select(slice(i, i + chunk_size)) for i in range(0, len(self), chunk_size)]

    def chunk(self, n_chunks: int) -> list["Batch"]:
        """`n_chunks` equal parts (data-parallel split); the size must divide evenly."""
        if len(self) % n_chunks:
            raise BatchContractError(f"[chunk] batch of {len(self)} rows does not split into {n_chunks} equal parts")
        return self.split(len(self) // n_chunks)

    @staticmethod
    def concat(batches: Iterable["Batch"]) -> "Batch":
        batches = [b for b in batches if len(b)]
        if not batches:
            return Batch()
        keys = set(batches[0].keys())
        for b in batches[1:]:
            if set(b.keys()) != keys:
                raise BatchContractError(f"[concat] key sets differ: {sorted(keys)} vs {sorted(b.keys())}")
        tensors = {k: torch.cat([b.tensors[k] for b in batches]) for k in batches[0].tensors}
        non_tensors = {k: np.concatenate([b.non_tensors[k] for b in batches]) for k in batches[0].non_tensors}
        return Batch(tensors, non_tensors, dict(batches[0].meta))

    def repeat(self, n: int, interleave: bool = True) -> "Batch":
        """n copies of each row: interleaved keeps a prompt's samples adjacent (a a b b)."""
        if interleave:
            tensors = {k: v.repeat_interleave(n, dim=0) for k, v in self.tensors.items()}
            non_tensors = {k: np.repeat(v, n, axis=0) for k, v in self.non_tensors.items()}
        else:
            tensors = {k: v.repeat(n, *([1] * (v.dim() - 1))) for k, v in self.tensors.items()}
            non_tensors = {k: np.concatenate([v] * n) for k, v in self.non_tensors.items()}
        return Batch(tensors, non_tensors, dict(self.meta))

    def to(self, device) -> "Batch":
        return Batch({k: v.to(device) for k, v in self.tensors.items()}, dict(self.non_tensors), dict(self.meta))

    # ---- the contract -------------------------------------------------------------------------
    def check(self, stage: str, expected_size: int | None = None) -> "Batch":
        """Validate sizes, dtypes and response-aligned shapes; raise naming `stage` on mismatch."""
        size = len(self) if expected_size is None else expected_size
        for key, value in list(self.tensors.items()) + list(self.non_tensors.items()):
            if len(value) != size:
                raise BatchContractError(
                    f"[{stage}] key {key!r}: expected batch size {size} (dim 0), got shape {tuple(np.shape(value))}"
                )
        self._check_dtypes(stage)
        if "responses" in self.tensors:
            expected = tuple(self.tensors["responses"].shape)
            for key in RESPONSE_ALIGNED:
                if key in self.tensors and tuple(self.tensors[key].shape) != expected:
                    raise BatchContractError(
                        f"[{stage}] key {key!r}: expected shape {expected} (B, T_resp) like 'responses', "
                        f"got {tuple(self.tensors[key].shape)}"
                    )
        return self

    def _check_dtypes(self, stage: str) -> None:
        for key, value in self.tensors.items():
            if key in FLOAT_KEYS and not value.is_floating_point():
                raise BatchContractError(f"[{stage}] key {key!r}: expected a floating dtype, got {value.dtype}")
            if key in INTEGER_KEYS and (value.is_floating_point() or value.is_complex()):
                raise BatchContractError(f"[{stage}] key {key!r}: expected an integer or bool dtype, got {value.dtype}")


def _as_object_array(values) -> np.ndarray:
    if isinstance(values, np.ndarray) and values.dtype == object:
        return values
    # Filled element by element: numpy would turn equal-length lists into a 2-D array.
    array = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):
        array[i] = value
    return array
