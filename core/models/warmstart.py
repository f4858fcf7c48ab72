"""Deterministic, cached SFT warm-start of the embedded tiny model on the arithmetic task.

RL needs a policy that already speaks the answer format and is right some of the time; a short
SFT gives exactly that. The step budget is chosen so that the warm-started model is far from
perfect: the room RL must then close. The result is cached under a key of every input, so the
first run pays ~a minute and later runs load it with `from_pretrained`.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen3ForCausalLM

from core.data import arithmetic
from core.file_lock import exclusive_file_lock
from core.models.tiny import build_tiny_tokenizer, tiny_qwen3_config

# Bump when the task, tokenizer or training code changes in a way that changes the weights.
WARMSTART_VERSION = 1


@dataclass(frozen=True)
class WarmStartConfig:
    steps: int = 1000
    batch_size: int = 64
    lr: float = 1e-3
    warmup_steps: int = 20
    num_examples: int = 3000
    slip_rate: float = 0.6  # share of carry/borrow answers taught wrong: the room left for RL
    seed: int = 0


def default_cache_dir() -> Path:
    root = os.environ.get("RECIPEZOO_CACHE") or os.path.join(Path.home(), ".cache", "recipezoo")
    return Path(root)


def cache_key(config: WarmStartConfig) -> str:
    task = {"max_operand": arithmetic.MAX_OPERAND, "operators": arithmetic.OPERATORS}
    model = tiny_qwen3_config(build_tiny_tokenizer()).to_dict()
    payload = json.dumps({"version": WARMSTART_VERSION, "task": task, "model": model, **asdict(config)},
                         sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:12]


def warm_started_model_path(config: WarmStartConfig = WarmStartConfig(), cache_dir: Path | None = None) -> Path:
    """Path of the warm-started HF model dir, training and caching it on first use."""
    path = Path(cache_dir or default_cache_dir()) / f"tiny-qwen3-arith-{cache_key(config)}"

    def train():
        tokenizer = build_tiny_tokenizer()
        return train_sft(tokenizer, config), tokenizer

    return cached_model_dir(path, config.steps, train)


def base_model_path(cache_dir: Path | None = None) -> Path:
    """`embedded://tiny-base`: the tiny Qwen3 before any training, its weights as the warm starts draw them (seed
    0). An SFT run starts from it (recipes/sft/), and its result is where RL starts."""
    tokenizer = build_tiny_tokenizer()
    model_config = tiny_qwen3_config(tokenizer)
    key = hashlib.sha256(json.dumps(model_config.to_dict(), sort_keys=True, default=str).encode()).hexdigest()[:12]

    def build():
        torch.manual_seed(0)
        return Qwen3ForCausalLM(model_config), tokenizer

    path = Path(cache_dir or default_cache_dir()) / f"tiny-qwen3-base-{key}"
    return cached_model_dir(path, 0, build, note="[tiny-base] building the untrained tiny model once")


def cached_model_dir(path: Path, steps: int, train, note: str | None = None) -> Path:
    """`path`, after `train() -> (model, tokenizer)` has saved there once. Processes that start together on an
    empty cache (two test workers, two leaderboard jobs) take turns on a lock beside it: one trains, the others
    wait and load its copy, so every run starts from the same file and no one's rename lands on a full dir."""
    if (path / "config.json").exists():
        return path
    with exclusive_file_lock(path.with_name(path.name + ".lock")):
        if (path / "config.json").exists():
            return path
        print(f"{note or f'[warm-start] training the tiny model once ({steps} SFT steps)'}; cached at {path}",
              flush=True)
        model, tokenizer = train()
        tmp = path.with_name(path.name + f".tmp{os.getpid()}")
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        os.replace(tmp, path)  # atomic: an interrupted run never leaves half a model at `path`
    return path


def sft_tensors(tokenizer, examples: list[tuple[list[dict], str]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded prompt+answer ids and a loss mask that is 1 on answer tokens only."""
    sequences, masks = [], []
    for messages, answer in examples:
        prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        answer_ids = tokenizer(answer, add_special_tokens=False)["input_ids"]
        answer_ids = answer_ids + [tokenizer.eos_token_id]
        sequences.append(prompt_ids + answer_ids)
        masks.append([0] * len(prompt_ids) + [1] * len(answer_ids))
    return right_padded(sequences, masks, tokenizer.pad_token_id)


def right_padded(sequences: list[list[int]], masks: list[list[int]], pad_token_id: int) -> tuple[torch.Tensor,
                                                                                                  torch.Tensor]:
    """(ids, loss_mask), each (B, longest): the sequences right-padded with `pad_token_id`, their masks with 0."""
    width = max(len(sequence) for sequence in sequences)
    ids = torch.full((len(sequences), width), pad_token_id, dtype=torch.long)
    loss_mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for row, (sequence, mask) in enumerate(zip(sequences, masks, strict=True)):
        ids[row, : len(sequence)] = torch.tensor(sequence)
        loss_mask[row, : len(mask)] = torch.tensor(mask)
    return ids, loss_mask


def train_sft(tokenizer, config: WarmStartConfig) -> Qwen3ForCausalLM:
    torch.manual_seed(config.seed)
    model = Qwen3ForCausalLM(tiny_qwen3_config(tokenizer))
    examples = arithmetic.sft_examples(config.num_examples, seed=config.seed, slip_rate=config.slip_rate)
    ids, loss_mask = sft_tensors(tokenizer, examples)
    return fit_sft(model, ids, loss_mask, config)


def fit_sft(model, ids: torch.Tensor, loss_mask: torch.Tensor, config) -> Qwen3ForCausalLM:
    """AdamW on random batches of (ids, loss_mask) rows; `config` has steps, batch_size, lr, warmup_steps, seed."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / config.warmup_steps))
    generator = torch.Generator().manual_seed(config.seed)
    start = time.time()
    model.train()
    for step in range(config.steps):
        index = torch.randint(0, len(ids), (config.batch_size,), generator=generator)
        loss = sft_loss(model, ids[index], loss_mask[index])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        if (step + 1) % 50 == 0 or step + 1 == config.steps:
            print(f"[warm-start] step {step + 1}/{config.steps} loss {loss.item():.4f} "
                  f"({time.time() - start:.0f}s)", flush=True)
    model.eval()
    return model


def sft_loss(model, ids: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    logits = model(input_ids=ids).logits[:, :-1]  # (B, T-1, V)
    targets, mask = ids[:, 1:], loss_mask[:, 1:].float()
    token_loss = torch.nn.functional.cross_entropy(logits.transpose(1, 2), targets, reduction="none")
    return (token_loss * mask).sum() / mask.sum()


def load_warm_started(config: WarmStartConfig = WarmStartConfig()):
    path = warm_started_model_path(config)
    return AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)
