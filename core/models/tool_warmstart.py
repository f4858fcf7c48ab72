"""The tiny model warm-started for the calculator task (`embedded://tiny-calc`): it speaks the tag action.

Short SFT on whole episodes, laid out token for token as the multi-turn rollout lays them out (`TurnTemplate`): the
loss is on the assistant turns only, never on the tool's reply or the template's turn boundaries. Most episodes
answer at once with a guess, a few call the calculator (`calculator.sft_episodes`), so the warm-started policy
calls the tool rarely and is almost never right: the room RL must close. Cached like the arithmetic warm start.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from transformers import Qwen3ForCausalLM

from core.data import calculator
from core.data.turn_template import TurnTemplate
from core.models.tiny import build_tiny_tokenizer, tiny_qwen3_config
from core.models.warmstart import cached_model_dir, default_cache_dir, fit_sft, right_padded

TAG_CHARACTERS = "<>"  # the tag action's brackets, beyond the embedded tokenizer's characters
TOOL_WARMSTART_VERSION = 2  # bump when the task or the SFT layout changes the weights


@dataclass(frozen=True)
class ToolWarmStartConfig:
    steps: int = 800
    batch_size: int = 32
    lr: float = 2e-3
    warmup_steps: int = 20
    num_examples: int = 4000
    call_rate: float = 0.08  # share of SFT episodes that call the calculator (the call habit RL starts from)
    copy_rate: float = 0.5  # more such episodes, their call out of the loss: they teach copying the reply
    seed: int = 0


def tool_model_path(config: ToolWarmStartConfig = ToolWarmStartConfig(), cache_dir: Path | None = None) -> Path:
    tokenizer = build_tiny_tokenizer(TAG_CHARACTERS)
    payload = json.dumps({"version": TOOL_WARMSTART_VERSION, "left": calculator.LEFT, "right": calculator.RIGHT,
                          "model": tiny_qwen3_config(tokenizer).to_dict(), **asdict(config)}, sort_keys=True,
                         default=str)
    key = hashlib.sha256(payload.encode()).hexdigest()[:12]
    path = Path(cache_dir or default_cache_dir()) / f"tiny-qwen3-calc-{key}"
    return cached_model_dir(path, config.steps, lambda: (train_tool_sft(tokenizer, config), tokenizer))


def episode_tensors(tokenizer, episodes) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded episode ids, and a loss mask that is 1 on the assistant turns' tokens (and their end), but for
    the first token of an episode whose call is not trained: the one that decides to call."""
    template = TurnTemplate(tokenizer)
    sequences, masks = [], []
    for messages, turns, replies, call_trained in episodes:
        ids = template.prompt_ids(messages)
        mask = [0] * len(ids)
        for index, turn in enumerate(turns):
            turn_ids = template.encode(turn)
            if index == len(turns) - 1:  # the answer: ends on the end-of-turn token the engine stops on
                turn_ids.append(tokenizer.eos_token_id)
            decided = int(call_trained or index > 0)  # the turn's first token decides between calling and guessing
            ids, mask = ids + turn_ids, mask + [decided] + [1] * (len(turn_ids) - 1)
            if index < len(replies):
                after = template.after_turn_ids(turn_ids, [{"role": "tool", "content": replies[index]}])
                ids, mask = ids + after, mask + [0] * len(after)
        sequences.append(ids)
        masks.append(mask)
    return right_padded(sequences, masks, tokenizer.pad_token_id)


def train_tool_sft(tokenizer, config: ToolWarmStartConfig) -> Qwen3ForCausalLM:
    torch.manual_seed(config.seed)
    model = Qwen3ForCausalLM(tiny_qwen3_config(tokenizer))
    episodes = calculator.sft_episodes(config.num_examples, seed=config.seed, call_rate=config.call_rate,
                                       copy_rate=config.copy_rate)
    ids, loss_mask = episode_tensors(tokenizer, episodes)
    return fit_sft(model, ids, loss_mask, config)
