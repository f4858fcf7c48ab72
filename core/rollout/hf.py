"""Rollout with HF transformers `generate`: the backend that runs anywhere, including CPU and CI.

It keeps its own (unsharded) copy of the policy, refreshed from the training engine's full state
dict after every update: the same weight-sync contract the vLLM and SGLang backends follow.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import replace

import torch
from transformers import GenerationConfig

from core.batch import Batch
from core.data.dataset import left_padded
from core.rollout.base import (
    Completion,
    RolloutBackend,
    SamplingParams,
    assemble_rollout,
    response_mask_from_ids,
)


class HFRollout(RolloutBackend):
    """`stop_ids`: the tokens a response ends on (`stop_token_ids`: the tokenizer's EOS and the model's own
    end-of-turn ids, as vLLM and SGLang stop); default the tokenizer's EOS alone."""

    def __init__(self, model, tokenizer, micro_batch_size: int = 0, stop_ids: Collection[int] | None = None):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.micro_batch_size = micro_batch_size  # 0: the whole batch at once
        self.stop_ids = sorted(stop_ids or {tokenizer.eos_token_id})

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def generate(self, prompts: Batch, params: SamplingParams) -> Batch:
        repeated = prompts.repeat(params.n, interleave=True)
        size = self.micro_batch_size or len(repeated)
        # One seed per call, not per chunk: the same (prompts, params) always give the same samples;
        # fork_rng leaves the caller's CPU and CUDA random streams as they were.
        cuda_devices = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=cuda_devices, enabled=params.seed is not None):
            if params.seed is not None:
                torch.manual_seed(params.seed)
            chunks = [self._generate_chunk(chunk, params) for chunk in repeated.split(size)]
        width = max(c[0].shape[1] for c in chunks)
        responses = torch.cat([_pad_right(c[0], width, self.tokenizer.pad_token_id) for c in chunks])
        log_probs = torch.cat([_pad_right(c[1], width, 0.0) for c in chunks])
        return assemble_rollout(prompts, responses, log_probs,
                                response_mask_from_ids(responses, self.stop_ids), params.n)

    def generate_ids(self, prompt_ids: list[list[int]], params: SamplingParams, max_new_tokens: list[int],
                     stop: tuple[str, ...] = ()) -> list[Completion]:
        """One padded `generate` up to the largest budget; each row is then cut at its first stop token, its
        first stop string (the token that completes it kept) or its own budget, whichever comes first."""
        input_ids, attention_mask = left_padded(prompt_ids, self.tokenizer.pad_token_id)
        prompts = Batch({"input_ids": input_ids, "attention_mask": attention_mask})
        longest = replace(params, n=1, max_new_tokens=max(max_new_tokens))
        size = self.micro_batch_size or len(prompt_ids)
        cuda_devices = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=cuda_devices, enabled=params.seed is not None):
            if params.seed is not None:
                torch.manual_seed(params.seed)
            chunks = [self._generate_chunk(chunk, longest, stop) for chunk in prompts.split(size)]
        rows = [row for responses, log_probs in chunks for row in zip(responses.tolist(), log_probs.tolist())]
        completions = []
        for (ids, log_probs), budget in zip(rows, max_new_tokens, strict=True):
            end = self._row_end(ids[:budget], stop)
            completions.append(Completion(ids[:end], log_probs[:end] if params.log_probs else []))
        return completions

    def _row_end(self, ids: list[int], stop: tuple[str, ...]) -> int:
        stop_ids = set(self.stop_ids)
        for position, token in enumerate(ids):
            if token in stop_ids:
                return position + 1
            if stop and any(text in self.tokenizer.decode(ids[: position + 1]) for text in stop):
                return position + 1
        return len(ids)

    @torch.no_grad()
    def _generate_chunk(self, chunk: Batch, params: SamplingParams,
                        stop: tuple[str, ...] = ()) -> tuple[torch.Tensor, torch.Tensor]:
        input_ids = chunk["input_ids"].to(self.device)
        out = self.model.generate(
            input_ids=input_ids,
            attention_mask=chunk["attention_mask"].to(self.device),
            generation_config=self._generation_config(params, stop),
            tokenizer=self.tokenizer if stop else None,  # stop strings are matched on the decoded text
        )
        responses = out.sequences[:, input_ids.shape[1]:]  # (B, T_resp)
        scale = 1.0 if params.greedy else params.temperature
        # One step at a time: a (B, T_resp, V) fp32 stack would be 40 GB for 256 × 256 tokens of Qwen3.
        log_probs = torch.stack([
            torch.log_softmax(step.float() / scale, dim=-1).gather(-1, responses[:, t, None]).squeeze(-1)
            for t, step in enumerate(out.logits)  # raw logits: before any warper
        ], dim=1)
        return responses.cpu(), log_probs.cpu()

    def _generation_config(self, params: SamplingParams, stop: tuple[str, ...] = ()) -> GenerationConfig:
        sampling = {} if params.greedy else dict(
            temperature=params.temperature, top_p=params.top_p, top_k=params.top_k,
        )
        return GenerationConfig(
            do_sample=not params.greedy,
            max_new_tokens=params.max_new_tokens,
            eos_token_id=self.stop_ids,
            pad_token_id=self.tokenizer.pad_token_id,
            output_logits=True,
            return_dict_in_generate=True,
            stop_strings=list(stop) or None,
            **sampling,
        )

    def load_weights(self, weights: Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]]) -> None:
        """A full state dict, or (name, tensor) pairs of the parameters alone (a weight stream, as
        `FSDPEngine.iter_full_weights` yields them), where a tied weight comes once, under its first name."""
        state = dict(weights.items() if isinstance(weights, Mapping) else weights)
        missing, unexpected = self.model.load_state_dict(state, strict=False)
        tied = dict(self.model.named_parameters(remove_duplicate=False)).keys() - dict(self.model.named_parameters())
        if unexpected or set(missing) - tied:
            raise RuntimeError(f"weight sync into the HF rollout: missing {sorted(set(missing) - tied)}, "
                               f"unexpected {sorted(unexpected)}; the trainer and the engine hold different models")


def _pad_right(x: torch.Tensor, width: int, value) -> torch.Tensor:
    if x.shape[1] == width:
        return x
    pad = torch.full((x.shape[0], width - x.shape[1]), value, dtype=x.dtype)
    return torch.cat([x, pad], dim=1)
