"""The policy as base model + optional adapter: one object the engine, the workers, the rollout and the memory
plan ask what trains, what the rollout engine is sent, what a checkpoint saves and what the reference is.

`policy_adapter(config.actor.lora)` decides it once, as torchtune applies PEFT as a model transform: a
`LoraSpec` (core/models/lora.py) for a LoRA policy, `FULL_WEIGHTS` without one. Both answer the same questions,
so no caller branches on `actor.lora`:

    apply_to(model, frozen_dtype, tensor_parallel)  the model to train (adapters injected, base frozen)
    gradient_checkpointing_kwargs                   how HF checkpointing must run for those parameters to train
    base_only(model)                                a context with the base model's forward: the reference
    reference_is_base                               whether that is the KL reference (no model of its own)
    hf_weights(pairs, with_adapters)                (HF name, tensor) for a rollout engine or an export
    rollout_adapter_rank                            the rank of an adapter the engine serves itself, or None
    saves_base, checkpoint_files(model_state)       what a checkpoint holds of the model
    adapter_parameter_count(meta_model)             the memory plan's trainable adapter parameters (0: all train)
"""

from __future__ import annotations

from typing import Callable, Iterable

import torch

from core.models.lora import LoraSpec


class FullWeights:
    """A policy without adapters: every weight trains, is synced and saved under its own HF name."""

    reference_is_base = False  # a KL reference is a frozen model of its own
    saves_base = True  # a checkpoint holds every weight, and loads strictly
    gradient_checkpointing_kwargs = None  # HF's default
    rollout_adapter_rank = None  # the engine loads whole weights

    def apply_to(self, model: torch.nn.Module, frozen_dtype: torch.dtype | None,
                 tensor_parallel: bool) -> torch.nn.Module:
        return model

    def base_only(self, model: torch.nn.Module):
        raise RuntimeError("compute_log_probs(adapters=False) needs an engine built with LoRA")

    def hf_weights(self, pairs: Iterable[tuple[str, torch.Tensor]], with_adapters: bool = True):
        return pairs

    def checkpoint_files(self, model_state: dict[str, torch.Tensor]) -> dict:
        return {"model": model_state}

    def adapter_parameter_count(self, meta_model: Callable[[], torch.nn.Module]) -> int:
        return 0  # the model is not built: nothing to count


FULL_WEIGHTS = FullWeights()
PolicyAdapter = FullWeights | LoraSpec


def policy_adapter(lora_cfg, base: dict | None = None) -> PolicyAdapter:
    """`actor.lora.*`: a `LoraSpec` on the base model `base` describes, or `FULL_WEIGHTS` when the rank is null."""
    return FULL_WEIGHTS if lora_cfg.rank is None else LoraSpec.from_config(lora_cfg, base)
