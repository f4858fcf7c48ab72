"""Build the rollout backend a run's `rollout:` config section asks for: the engine, and the multi-turn episodes
around it under `rollout.multi_turn`. The trainer's workers, `recipezoo generate` and the benchmarks build theirs here."""

from __future__ import annotations

import torch

from core.models.adapter import FULL_WEIGHTS, PolicyAdapter
from core.rollout.base import RolloutBackend, stop_token_ids
from core.rollout.hf import HFRollout
from core.rollout.multi_turn.settings import build_multi_turn
from core.rollout.multi_turn.settings import enabled as multi_turn_enabled


def build_rollout(config, model_path: str, tokenizer, load_hf_model,
                  adapter: PolicyAdapter = FULL_WEIGHTS) -> RolloutBackend:
    """The engine of `build_engine`, running tool-using episodes with it under `rollout.multi_turn`."""
    engine = build_engine(config, model_path, tokenizer, load_hf_model, adapter)
    if not multi_turn_enabled(config.rollout):
        return engine
    return build_multi_turn(config, engine, tokenizer, stop_token_ids(tokenizer, model_path))


def build_engine(config, model_path: str, tokenizer, load_hf_model,
                 adapter: PolicyAdapter = FULL_WEIGHTS) -> RolloutBackend:
    """`rollout.name`: hf (its own HF copy of the policy, from `load_hf_model()`), vllm or sglang. `adapter`: the
    trained policy's (core/models/adapter.py); a vLLM engine makes room for the one it serves itself, if any."""
    rollout = config.rollout
    if rollout.name == "hf":
        return HFRollout(load_hf_model(), tokenizer, micro_batch_size=rollout.micro_batch_size,
                         stop_ids=stop_token_ids(tokenizer, model_path))
    if rollout.name in ("vllm", "sglang"):
        max_model_len = rollout.max_model_len or _engine_max_len(model_path, config.data)
        dtype = "bfloat16" if torch.cuda.is_available() else "float32"  # CPU: the trainer's fp32, exactly
        if rollout.name == "vllm":
            from core.rollout.vllm import VLLMRollout

            return VLLMRollout(model_path, tokenizer, rollout, dtype=dtype, seed=config.trainer.seed,
                               max_model_len=max_model_len, dummy_weights=config.model.init == "random",
                               lora_rank=adapter.rollout_adapter_rank,
                               expandable_segments=bool(config.actor.expandable_segments))
        from core.rollout.sglang import SGLangRollout

        return SGLangRollout(model_path, tokenizer, rollout, dtype=dtype, seed=config.trainer.seed,
                             max_model_len=max_model_len, dummy_weights=config.model.init == "random")
    raise ValueError(f"rollout.name={rollout.name!r}: expected one of ['hf', 'vllm', 'sglang']")


def _engine_max_len(model_path: str, data) -> int:
    """Prompt + response budget, capped at the model's context: vLLM refuses a longer max_model_len."""
    from transformers import AutoConfig

    limit = getattr(AutoConfig.from_pretrained(model_path), "max_position_embeddings", None)
    wanted = data.max_prompt_length + data.max_response_length
    return min(wanted, int(limit)) if limit else wanted
