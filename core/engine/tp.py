"""Megatron-style tensor parallelism on DTensor, composable with FSDP2 on a 2-D ("dp", "tp") mesh.

Each decoder block splits its attention by heads and its MLP by the intermediate dimension:
q/k/v and gate/up are column-parallel (each tp rank computes its share of heads / features),
o_proj and down_proj are row-parallel (partial sums, one all-reduce each). So a block costs one
all-reduce after attention and one after the MLP in the forward, and two in the backward.

Embeddings, the final norm and lm_head stay replicated: a vocab-parallel embedding/lm_head would
need a vocab-parallel cross-entropy and log-prob/entropy path through `core.engine.logprob_head`; at
the model sizes we train, the per-block projections dominate and this is the simplest correct
choice. The block norms see replicated activations (after the row-parallel all-reduce), so their
gradients are already equal on every tp rank and they stay plain tensors too.
"""

from __future__ import annotations

import torch
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import MixedPrecisionPolicy
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)

from core.engine.sharding import decoder_layers, shard_model

# Attributes some HF attention classes (older Llama/Qwen2 code) keep and use in
# `view(bsz, q_len, self.num_heads, head_dim)`; transformers 5 uses `view(..., -1, head_dim)`.
_HEAD_COUNT_ATTRS = ("num_heads", "num_key_value_heads")


def check_tensor_parallel_size(config, tp_size: int) -> None:
    """Raise unless every tp rank gets a whole number of query and key/value heads."""
    if tp_size < 1:
        raise ValueError(f"actor.tensor_parallel_size={tp_size}: must be >= 1")
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads or config.num_attention_heads
    for name, count in (("num_attention_heads", heads), ("num_key_value_heads", kv_heads)):
        if count % tp_size:
            divisors = [d for d in range(1, kv_heads + 1)
                        if heads % d == 0 and kv_heads % d == 0 and config.intermediate_size % d == 0]
            raise ValueError(
                f"actor.tensor_parallel_size={tp_size} does not divide the model's {name}={count} "
                f"(attention heads are split across tp ranks); use one of {divisors}")
    if config.intermediate_size % tp_size:
        raise ValueError(f"actor.tensor_parallel_size={tp_size} does not divide the model's "
                         f"intermediate_size={config.intermediate_size} (the MLP is split across tp ranks)")


def parallelize_decoder(model: torch.nn.Module, tp_mesh: DeviceMesh) -> torch.nn.Module:
    """Tensor-parallel every block of a Qwen3/Llama-style HF decoder in place over `tp_mesh`.

    Every tp rank must hold the same full weights before the call (same seed or same checkpoint):
    each keeps its slice of the projections and the rest as replicas.
    """
    tp_size = tp_mesh.size()
    check_tensor_parallel_size(model.config, tp_size)
    for layer in decoder_layers(model):
        attn = layer.self_attn
        plan = {
            # use_local_output=True: the block's own code then runs on plain local tensors, so HF's
            # `view(..., -1, head_dim)` yields the local head count by itself.
            "self_attn.q_proj": ColwiseParallel(),
            "self_attn.k_proj": ColwiseParallel(),
            "self_attn.v_proj": ColwiseParallel(),
            "self_attn.o_proj": RowwiseParallel(),
            "mlp.gate_proj": ColwiseParallel(),
            "mlp.up_proj": ColwiseParallel(),
            "mlp.down_proj": RowwiseParallel(),
        }
        for norm in ("q_norm", "k_norm"):  # Qwen3's per-head norms (Llama has none)
            if hasattr(attn, norm):
                # They see only this rank's heads, so their weight gradient is a partial sum over
                # heads. As replicated DTensors fed a head-sharded (B, T, H_local, D) input,
                # DTensor all-reduces that gradient (HF's plan calls it replicated_with_grad_allreduce).
                plan[f"self_attn.{norm}"] = SequenceParallel(sequence_dim=2, use_local_output=True)
        parallelize_module(layer, tp_mesh, plan)
        # Head counts kept on the module (not on the shared config, which still describes the
        # whole model) must become local ones; num_key_value_groups is a ratio and stays.
        for attr in _HEAD_COUNT_ATTRS:
            if isinstance(getattr(attn, attr, None), int):
                setattr(attn, attr, getattr(attn, attr) // tp_size)
    return model


def shard_model_2d(model: torch.nn.Module, mesh: DeviceMesh,
                   mp_policy: MixedPrecisionPolicy | None = None) -> torch.nn.Module:
    """TP over mesh["tp"], then FSDP2 over mesh["dp"]: FSDP2's documented 2-D composition.

    fully_shard sees the TP parameters as DTensors on the tp mesh and shards them further on dp;
    gradients are averaged over the dp group only (tp ranks hold the same data, not more of it).
    """
    if mesh.mesh_dim_names != ("dp", "tp"):
        raise ValueError(f"shard_model_2d needs a ('dp', 'tp') mesh from build_mesh, got {mesh.mesh_dim_names}")
    if mesh["tp"].size() > 1:
        parallelize_decoder(model, mesh["tp"])
    return shard_model(model, mp_policy, mesh=mesh["dp"])


def clip_grad_norm(parameters, max_norm: float) -> float:
    """Global L2 gradient norm, then clip; works when parameters live on different meshes.

    After shard_model_2d the projections are DTensors on the (dp, tp) mesh but the replicated
    parameters (embeddings, norms) on the dp mesh alone, and torch's clip_grad_norm_ refuses to
    mix meshes. Each mesh's norm is reduced on its own (full_tensor) and the squares summed.
    """
    groups: dict = {}
    for param in parameters:
        if param.grad is not None:
            mesh = param.grad.device_mesh if isinstance(param.grad, DTensor) else None
            groups.setdefault(mesh, []).append(param.grad)
    squares = []
    for grads in groups.values():
        norm = torch.nn.utils.get_total_norm(grads, norm_type=2.0)
        squares.append((norm.full_tensor() if isinstance(norm, DTensor) else norm).double() ** 2)
    total = float(torch.stack(squares).sum().sqrt()) if squares else 0.0
    coef = min(1.0, max_norm / (total + 1e-6))  # torch's formula; a float, so no mesh is mixed
    if coef < 1.0:
        for grads in groups.values():
            for grad in grads:
                grad.mul_(coef)
    return total
