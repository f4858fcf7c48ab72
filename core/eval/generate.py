"""`recipezoo generate`: n responses per prompt from any model, saved as parquet next to the prompt rows.

Generation goes through the same rollout backend and prompt pipeline as training (chat template,
left padding, seeded sampling), so an offline evaluation measures what validation measures.
Each output row is the input row plus `responses` (n strings), `response_lengths` (tokens) and
`generation` (the settings), so a results file carries its own protocol; a multi-turn rollout's rows also carry
`episodes`, each episode column of its n responses (turns, tool calls, tool errors, stop reason), which
`recipezoo eval` turns into tool figures.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from core.data.dataset import PromptDataset, collate_prompts
from core.data.rows import read_rows, write_rows
from core.models.loading import load_causal_lm, load_tokenizer, resolve_model_path
from core.rollout.base import SamplingParams
from core.rollout.build import build_rollout
from core.rollout.multi_turn.episode_metrics import EPISODE_COLUMNS
from core.tracking.console import format_duration


@dataclass(frozen=True)
class GenerationSpec:
    model: str
    data: tuple[str, ...]
    gguf_file: str | None = None
    n: int = 1
    temperature: float = 0.0  # 0 = greedy
    top_p: float = 1.0
    top_k: int = 0
    max_tokens: int = 512
    max_prompt_length: int = 1024
    batch_size: int = 64  # prompts per generate call
    max_samples: int | None = None  # the first N prompts; None = all
    seed: int = 0
    rollout: str = "hf"
    device: str = "auto"
    gpu_memory_utilization: float = 0.5  # vllm/sglang: the engine's share of the GPU (rollout.gpu_memory_utilization)


def generate_responses(spec: GenerationSpec, out: str | Path, rollout=None, tokenizer=None,
                       template_kwargs: dict | None = None) -> Path:
    """Generate for every prompt of `spec.data` (up to max_samples) and write `out` (.parquet/.jsonl).

    `rollout` and its `tokenizer`: a backend built elsewhere, e.g. a trainer's engine holding the
    policy it trained, or tool-using episodes around one (rollout.multi_turn); `spec.model` then only names that
    policy in the written settings. `template_kwargs`: more arguments for the chat template, as the training
    prompts had them (a multi-turn run's tool schemas).
    """
    if (rollout is None) != (tokenizer is None):
        raise ValueError("generate_responses: pass both rollout and tokenizer, or neither")
    if rollout is None:
        device = torch.device("cuda" if spec.device == "auto" and torch.cuda.is_available()
                              else ("cpu" if spec.device == "auto" else spec.device))
        model_path = resolve_model_path(spec.model)
        tokenizer = load_tokenizer(model_path, spec.gguf_file)
        dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
        model = load_causal_lm(model_path, spec.gguf_file, dtype=dtype).to(device) if spec.rollout == "hf" else None
        rollout = build_rollout(_rollout_config(spec), model_path, tokenizer, lambda: model)
    dataset = PromptDataset(list(spec.data), tokenizer, max_prompt_length=spec.max_prompt_length,
                            template_kwargs=template_kwargs)
    items = dataset.items[: spec.max_samples] if spec.max_samples else dataset.items
    source_rows = [row for path in spec.data for row in read_rows(path)]
    settings = {key: value for key, value in asdict(spec).items() if key not in ("data", "batch_size", "device",
                                                                               "gpu_memory_utilization")}
    settings["model"] = str(spec.model)
    rows, started = [], time.perf_counter()
    for first in range(0, len(items), spec.batch_size):
        chunk = items[first:first + spec.batch_size]
        params = SamplingParams(n=spec.n, temperature=spec.temperature, top_p=spec.top_p, top_k=spec.top_k,
                                max_new_tokens=spec.max_tokens, seed=spec.seed + first, log_probs=False)
        batch = rollout.generate(collate_prompts(chunk, dataset.pad_token_id), params)
        texts, lengths = decode(batch, tokenizer)
        columns = [key for key in EPISODE_COLUMNS if key in batch.non_tensors]
        for i, item in enumerate(chunk):
            mine = slice(i * spec.n, (i + 1) * spec.n)
            row = {**source_rows[item.index], "responses": texts[mine], "response_lengths": lengths[mine],
                   "generation": settings}
            if columns:  # a multi-turn rollout: what each episode did with its tools
                row["episodes"] = {key: [_plain(value) for value in batch.non_tensors[key][mine]] for key in columns}
            rows.append(row)
        _progress(len(rows), len(items), started)
    return write_rows(rows, out)


def _rollout_config(spec: GenerationSpec):
    """The slice of the training config that `build_rollout` reads, from base.yaml's defaults."""
    from omegaconf import OmegaConf

    base = OmegaConf.load(Path(__file__).resolve().parents[1] / "config" / "base.yaml")
    base.rollout.name, base.rollout.gpu_memory_utilization = spec.rollout, spec.gpu_memory_utilization
    base.data.max_prompt_length, base.data.max_response_length = spec.max_prompt_length, spec.max_tokens
    base.trainer.seed = spec.seed
    return base


def decode(batch, tokenizer) -> tuple[list[str], list[int]]:
    """Response texts (only masked-in tokens, special tokens dropped) and their token counts."""
    mask = batch["response_mask"].bool()
    ids = [row[row_mask].tolist() for row, row_mask in zip(batch["responses"], mask)]
    return tokenizer.batch_decode(ids, skip_special_tokens=True), mask.sum(-1).tolist()


def _plain(value):
    """A numpy scalar as the Python value parquet and JSON write."""
    return value.item() if hasattr(value, "item") else value


def _progress(done: int, total: int, started: float) -> None:
    elapsed = time.perf_counter() - started
    eta = elapsed / done * (total - done)
    print(f"generated {done}/{total} prompts | {format_duration(elapsed)} | ETA {format_duration(eta)}", flush=True)
