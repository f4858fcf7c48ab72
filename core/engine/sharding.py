"""FSDP2 sharding of an HF decoder, shared by the 1-D engine (`fsdp.py`) and the 2-D TP x FSDP2 path
(`tp.py`): below both, so neither imports the other's helpers.
"""

from __future__ import annotations

import torch
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard


def shard_model(model: torch.nn.Module, mp_policy: MixedPrecisionPolicy | None,
                offload: CPUOffloadPolicy | None = None, mesh=None) -> torch.nn.Module:
    """FSDP2: shard each transformer block, then the root (embeddings, norm, head), over `mesh`
    (None: every rank; tensor parallel passes its "dp" sub-mesh)."""
    kwargs = {"mp_policy": mp_policy} if mp_policy is not None else {}
    if offload is not None:
        kwargs["offload_policy"] = offload
    if mesh is not None:
        kwargs["mesh"] = mesh
    for layer in decoder_layers(model):
        fully_shard(layer, **kwargs)
    fully_shard(model, **kwargs)
    return model


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if layers is None:
        raise TypeError(f"{type(model).__name__}: expected a decoder with `.model.layers` (Qwen/Llama style)")
    return list(layers)


def check_checkpoint_layers(count: int, layers: int) -> None:
    """`actor.checkpoint_layers` against the model's decoder layers: one line naming the key, before any load where
    the trainer checks it (core/trainer/setup.py), and again where an engine applies it."""
    if not 1 <= count <= layers:
        raise ValueError(f"actor.checkpoint_layers={count}: expected 1 to the model's {layers} decoder layers, "
                         "or null for all of them")
