"""A tiny random policy and a batch it sampled, with random advantages: the inputs the engine tests
(packing, LoRA) push through forward, log-probs and an update."""

from __future__ import annotations

import copy
from pathlib import Path

import torch
from transformers import Qwen3ForCausalLM

from core.batch import Batch
from core.data.arithmetic import make_rows
from core.data.dataset import PromptDataset, collate_prompts
from core.data.rows import write_rows
from core.models.tiny import tiny_qwen3_config
from core.rollout.base import SamplingParams
from core.rollout.hf import HFRollout


def tiny_policy(tokenizer) -> Qwen3ForCausalLM:
    """Two layers, seeded, with a wide init so its samples differ in length."""
    torch.manual_seed(0)
    return Qwen3ForCausalLM(tiny_qwen3_config(tokenizer, num_hidden_layers=2, initializer_range=0.2)).eval()


def sampled_batch(model, tokenizer, data_dir: Path, *, prompts: int, n: int, max_new_tokens: int) -> Batch:
    """`prompts` arithmetic problems × `n` samples from (a copy of) `model`, with seeded random advantages."""
    path = write_rows(make_rows("test", prompts, seed=1), data_dir / "test.parquet")
    dataset = PromptDataset(path, tokenizer, max_prompt_length=64)
    batch = HFRollout(copy.deepcopy(model), tokenizer).generate(
        collate_prompts(list(dataset), dataset.pad_token_id),
        SamplingParams(n=n, temperature=1.0, max_new_tokens=max_new_tokens, seed=0))
    gen = torch.Generator().manual_seed(0)
    batch.tensors["advantages"] = torch.randn(batch["response_mask"].shape, generator=gen) * batch["response_mask"]
    return batch
