"""What a supervised (SFT) run is built from, and what it must pass before anything is built.

The same pieces as an RL run's (core/trainer/setup.py): the process group, the resume plan, the seed, the model
dir, the data loader and its resume position, tracking last; in place of the RL roles, one policy engine: the RL
actor's FSDP2 engine (`build_actor_engine`), with its packing, token budget, compiled blocks, chunked log-prob
head and LoRA, as the `actor.*` keys set them. There is no rollout engine, reward or reference model.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from core.config import ConfigError
from core.data.loader import PromptLoader
from core.data.rows import DataError, read_rows
from core.data.sft_dataset import SFTDataset, SFTKeys, collate_sft, conversations, row_tools
from core.engine.distributed import World
from core.engine.fsdp import FSDPEngine
from core.models.loading import load_tokenizer
from core.models.random_init import build_causal_lm
from core.tracking.tracker import Tracking
from core.trainer.config_checks import (
    check_actor_memory,
    check_lora,
    check_profile_steps,
    checked_common,
    planned_world,
)
from core.trainer.resume import check_data_position
from core.trainer.setup import data_files, prepare_model, start_tracking, start_world
from core.trainer.start_record import PREFIX
from core.trainer.workers import actor_adapter, build_actor_engine


@dataclass
class SFTComponents:
    world: World
    tokenizer: object
    train_loader: PromptLoader  # of SFT examples (collate_sft)
    val_dataset: SFTDataset | None  # None: trainer.test_freq=0
    engine: FSDPEngine
    tracking: Tracking
    resume_from: Path | None
    start_record: dict[str, float]


def sft_keys(data) -> SFTKeys:
    return SFTKeys(prompt_key=data.prompt_key, response_key=data.response_key, messages_key=data.messages_key)


def build_sft_components(config) -> SFTComponents:
    began = time.perf_counter()
    world, dp_size = start_world(config)
    resume, model_path = prepare_model(config, world)
    tokenizer = load_tokenizer(model_path, config.model.gguf_file, config.model.trust_remote_code)
    train_set = sft_dataset(config.data, tokenizer, "train")
    val_set = sft_dataset(config.data, tokenizer, "val") if config.trainer.test_freq else None
    loader = PromptLoader(train_set, config.data.train_batch_size, seed=config.trainer.seed, shuffle=config.data.shuffle,
                          rank=world.dp_rank, world_size=dp_size, collate=collate_sft)
    if resume is not None:
        check_data_position(loader.state_dict(), resume)
    record = {PREFIX + "driver_setup": time.perf_counter() - began}

    def load():
        return build_causal_lm(config.model, model_path, seed=config.trainer.seed)

    engine = build_actor_engine(config, world, load, actor_adapter(config, model_path), record)
    tracking = start_tracking(config, world, model_path, resume, record)
    return SFTComponents(world, tokenizer, loader, val_set, engine, tracking, resume.path if resume else None, record)


def sft_dataset(data, tokenizer, split: str) -> SFTDataset:
    dataset = SFTDataset(data_files(data, split), tokenizer, max_prompt_length=data.max_prompt_length,
                         max_response_length=data.max_response_length, truncation=data.truncation, keys=sft_keys(data))
    if split == "val" and data.val_max_samples:
        dataset.items = dataset.items[: data.val_max_samples]
    return dataset


# ---- before anything starts ---------------------------------------------------------------------
def check_sft_config(config, world: tuple[int, str] | None = None) -> dict:
    """The config checks that apply to a supervised run (types, ranges, parallelism, LoRA, memory keys), and its
    own: the local controller, and a batch that splits over the data-parallel ranks. RL-only keys (rollout,
    reward, algorithm, schedule) are not read by an SFT run and not checked. `world`: (ranks, where that number
    comes from), default this launch's; the dry run passes the config's (`planned_world`)."""
    resolved, size, source = checked_common(config, world)
    trainer, batch = resolved["trainer"], resolved["data"]["train_batch_size"]
    if trainer["controller"] != "local":
        raise ConfigError(f"trainer.controller={trainer['controller']} with an SFT trainer — supervised runs use the "
                          "local controller (one process, or one per GPU under torchrun); set trainer.controller=local")
    ranks = size // resolved["actor"]["tensor_parallel_size"]
    if batch % ranks:
        raise ConfigError(f"data.train_batch_size={batch} must be divisible by the {ranks} data-parallel rank(s) "
                          f"({source}) — use a multiple of {ranks}")
    check_lora(resolved)
    check_actor_memory(resolved)
    check_profile_steps(resolved)
    return resolved


def check_sft_file(path: str, data) -> None:
    """The file exists, has rows, and each row is a conversation with an assistant turn to train on (the fields
    `data.response_key` or `data.messages_key` name, of the right types): one line naming the row otherwise."""
    rows = read_rows(path)
    if not rows:
        raise DataError(f"{path}: the file has no rows — an SFT dataset needs at least one conversation")
    conversations(rows, Path(path), sft_keys(data))
    for index, row in enumerate(rows):
        row_tools(row, Path(path), index)


def sft_plan(config) -> str:
    """What `recipezoo sft --dry-run` prints: the run the config describes, at the world it asks for."""
    resolved = check_sft_config(config, planned_world(config))
    data, actor, trainer = resolved["data"], resolved["actor"], resolved["trainer"]
    ranks = trainer["nnodes"] * trainer["n_gpus_per_node"] // actor["tensor_parallel_size"]
    rows = (f"prompt {data['prompt_key']} + response {data['response_key']}" if data["response_key"]
            else f"messages {data['messages_key']}")
    micro = (f"{actor['micro_batch_tokens']} tokens" if actor["micro_batch_tokens"]
             else f"{actor['micro_batch_size']} rows")
    lora = f"rank {actor['lora']['rank']}, alpha {actor['lora']['alpha']}" if actor["lora"]["rank"] else "off"
    lines = [
        "SFT plan (dry run: nothing is loaded or trained)",
        f"model        {resolved['model']['path']} ({resolved['model']['init']})",
        f"trainer      {trainer['cls']}, {trainer['nnodes']} node × {trainer['n_gpus_per_node']} devices "
        f"({ranks} data-parallel)",
        f"data         train {data['train_files']}, val {data['val_files']}; rows: {rows}",
        f"batch        {data['train_batch_size']} examples/step, {data['train_batch_size'] // ranks} per rank; "
        f"micro-batches of {micro}",
        f"lengths      prompt ≤ {data['max_prompt_length']}, response ≤ {data['max_response_length']} tokens "
        f"(data.truncation={data['truncation']})",
        f"optimizer    {trainer['total_steps']} steps, lr {actor['lr']:g} (warm-up {actor['warmup_steps']}), "
        f"loss agg {actor['loss_agg_mode']}, LoRA {lora}",
        f"checkpoints  every {trainer['save_freq']} steps in {trainer['checkpoint_dir']}",
    ]
    return "\n".join(lines)
