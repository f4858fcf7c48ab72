"""Rollout with `sglang.Engine`: the second fast backend, behind the same interface as vLLM's.

SGLang runs only on GPUs (it cannot be installed on the CPU machines CI uses) and needs sglang
0.5.11–0.5.17 with torch 2.11. UNTESTED in this repo so far: see the README's rollout section.
The surface used is `Engine(...)`, `generate(input_ids=..., return_logprob=True)`,
`update_weights_from_tensor`, `flush_cache` and `release/resume_memory_occupation`.
"""

from __future__ import annotations

import os

import torch

from core.data.batch import Batch
from core.rollout.base import RolloutBackend, SamplingParams, assemble_rollout
from core.rollout.placement import EnginePlacement

WEIGHT_SYNC_CHUNK_BYTES = 512 * 2**20  # bounded device memory for the incoming weights


def import_sglang():
    try:
        import sglang
    except ImportError as error:
        raise ImportError(
            f"rollout.name=sglang needs SGLang ({error}); it runs on NVIDIA GPUs only: pip install "
            "'sglang[all]>=0.5.11,<0.5.18' (torch 2.11). On CPU use rollout.name=hf or vllm."
        ) from error
    return sglang


def engine_placement(placement: EnginePlacement, seed: int) -> dict:
    """`sglang.Engine` arguments for this rank. SGLang's engine starts its own worker processes, so
    under several ranks each rank's engine is one GPU, its own (`base_gpu_id`, else every rank's engine
    would start on GPU 0); an engine spanning ranks, as vLLM's external launcher does, is not offered."""
    if placement.spmd and placement.tensor_parallel_size > 1:
        raise ValueError(f"rollout.tensor_model_parallel_size={placement.tensor_parallel_size} with rollout.name=sglang "
                         f"over {placement.world_size} ranks: SGLang's engine cannot span ranks; use 1 (one engine "
                         "per GPU) or rollout.name=vllm")
    local_rank = int(os.environ.get("LOCAL_RANK", 0)) if placement.spmd else 0
    return {"tp_size": placement.tensor_parallel_size, "base_gpu_id": local_rank,
            "random_seed": seed + placement.engine_index}


class SGLangRollout(RolloutBackend):
    def __init__(self, model_path: str, tokenizer, rollout_cfg, *, dtype: str = "bfloat16", seed: int = 0,
                 max_model_len: int | None = None):
        sglang = import_sglang()
        self.tokenizer = tokenizer
        self.can_sleep = bool(rollout_cfg.free_cache_engine)
        placement = EnginePlacement.current(rollout_cfg.tensor_model_parallel_size)
        self.engine = sglang.Engine(
            model_path=model_path, dtype=dtype, skip_tokenizer_init=True,
            mem_fraction_static=rollout_cfg.gpu_memory_utilization, context_length=max_model_len,
            enable_memory_saver=self.can_sleep, **engine_placement(placement, seed),
        )
        self.asleep = False

    def generate(self, prompts: Batch, params: SamplingParams) -> Batch:
        self.wake_up()
        repeated = prompts.repeat(params.n, interleave=True)  # one request per sample keeps the order explicit
        input_ids = [ids[mask.bool()].tolist() for ids, mask in zip(repeated["input_ids"], repeated["attention_mask"])]
        sampling = {"max_new_tokens": params.max_new_tokens, "stop_token_ids": [self.tokenizer.eos_token_id],
                    "temperature": params.temperature, "top_p": params.top_p, "top_k": params.top_k or -1}
        outputs = self.engine.generate(input_ids=input_ids, sampling_params=sampling, return_logprob=True)
        width = max(1, max(len(out["output_ids"]) for out in outputs))
        responses = torch.full((len(outputs), width), self.tokenizer.pad_token_id, dtype=torch.long)
        log_probs = torch.zeros((len(outputs), width), dtype=torch.float32)  # (B, T_resp)
        for row, out in enumerate(outputs):
            ids = out["output_ids"]
            responses[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
            token_logprobs = [entry[0] for entry in out["meta_info"]["output_token_logprobs"]]
            log_probs[row, : len(token_logprobs)] = torch.tensor(token_logprobs, dtype=torch.float32)
        return assemble_rollout(prompts, responses, log_probs, self.tokenizer.eos_token_id, params.n)

    def load_weights(self, state_dict: dict[str, torch.Tensor]) -> None:
        self.wake_up()
        device = torch.device("cuda", torch.cuda.current_device())
        for chunk in _chunked(list(state_dict.items()), WEIGHT_SYNC_CHUNK_BYTES):
            self.engine.update_weights_from_tensor(named_tensors=[(name, t.to(device)) for name, t in chunk])
        self.engine.flush_cache()  # cached prefixes were computed with the old weights

    def sleep(self) -> None:
        if self.can_sleep and not self.asleep:
            self.engine.release_memory_occupation()
            self.asleep = True

    def wake_up(self) -> None:
        if self.asleep:
            self.engine.resume_memory_occupation()
            self.asleep = False


def _chunked(items: list[tuple[str, torch.Tensor]], max_bytes: int):
    """Lists of (name, tensor) of at most `max_bytes` each (a larger single tensor goes alone)."""
    chunk, size = [], 0
    for name, tensor in items:
        nbytes = tensor.numel() * tensor.element_size()
        if chunk and size + nbytes > max_bytes:
            yield chunk
            chunk, size = [], 0
        chunk.append((name, tensor))
        size += nbytes
    if chunk:
        yield chunk
