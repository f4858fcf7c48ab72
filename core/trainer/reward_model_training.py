"""`recipezoo rm`: train a reward model on preference pairs with the Bradley-Terry loss (core/algos/bradley_terry.py).

The model is the policy's architecture with a scalar head (core/models/reward_model.py), trained on the FSDP2 engine
the RL trainers use (`head="reward"`), so it runs on one CPU, one GPU, or every GPU of a node under torchrun (each
rank takes its share of each step's pairs). Its checkpoints are the trainers' (`<out>/checkpoints/global_step_N/
reward_model/`), and the final model is written as a plain HF dir (`<out>/model`) that `reward.model.path` loads.
Held-out pairwise accuracy (the share of held-out pairs whose chosen answer scores above the rejected one) is
logged before training and after each epoch, to MLflow and the console.
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from core.algos.bradley_terry import bradley_terry_loss, pairwise_accuracy
from core.data.preference import PAIR_KEY, PreferencePair, load_pairs, pair_batch, split_held_out
from core.engine.distributed import World, all_gather_object, init_distributed
from core.engine.fsdp import FSDPEngine, OptimConfig
from core.models.loading import load_tokenizer, resolve_model_path
from core.models.reward_model import load_reward_model
from core.tracking.mlflow_tracker import MLflowTracker
from core.trainer.checkpoint import CheckpointManager
from core.trainer.checkpoint_export import merge_checkpoint, write_hf_files
from core.trainer.seed import seed_everything

ROLE = "reward_model"


@dataclass(frozen=True)
class RewardModelSpec:
    model: str  # the body to start from: a causal LM (fresh head) or a reward model to train further
    train_files: tuple[str, ...]
    out: str
    val_files: tuple[str, ...] = ()
    val_fraction: float = 0.1  # with no val_files: this share of the prompts held out
    epochs: int = 1
    batch_size: int = 32  # pairs per optimizer step, over all ranks
    lr: float = 1e-5
    weight_decay: float = 0.0
    warmup_steps: int = 0
    grad_clip: float = 1.0
    micro_batch_size: int = 16  # rows (two per pair) per forward, when micro_batch_tokens is unset
    micro_batch_tokens: int | None = None
    max_length: int = 1024  # tokens of prompt + answer; longer pairs are left out (and counted)
    mixed_precision: str = "auto"
    seed: int = 0
    device: str = "auto"
    mlflow_uri: str | None = None
    experiment: str = "recipezoo-rm"
    run_name: str | None = None
    tracking: bool = True


def check_spec(spec: RewardModelSpec) -> None:
    """Every number in range and every file there: one line naming the flag, before any model or run exists."""
    for flag, value, low in (("--epochs", spec.epochs, 1), ("--batch-size", spec.batch_size, 1),
                             ("--micro-batch-size", spec.micro_batch_size, 2), ("--max-length", spec.max_length, 2)):
        if value < low:
            raise ValueError(f"{flag}={value}: must be at least {low}")
    if spec.micro_batch_tokens is not None and spec.micro_batch_tokens < 1:
        raise ValueError(f"--micro-batch-tokens={spec.micro_batch_tokens}: must be at least 1")
    if not spec.lr > 0:
        raise ValueError(f"--lr={spec.lr:g}: must be > 0")
    if not spec.val_files and not 0 < spec.val_fraction < 1:
        raise ValueError(f"--val-fraction={spec.val_fraction:g}: must be in (0, 1), or give --val-files")
    for path in (*spec.train_files, *spec.val_files):
        if not Path(path).is_file():
            raise FileNotFoundError(f"preference file {path} does not exist")


def train_reward_model(spec: RewardModelSpec) -> dict[str, float]:
    """Train, save and export; returns the last held-out metrics (rm/val/acc, rm/val/loss)."""
    check_spec(spec)
    model_path = resolve_model_path(spec.model)
    tokenizer = load_tokenizer(model_path)
    train, val, left_out = _pairs(spec, tokenizer)
    world = init_distributed(spec.device)
    seed_everything(spec.seed)
    engine = FSDPEngine(load_reward_model(model_path, fresh_head=True), world, head="reward",
                        optim=OptimConfig(lr=spec.lr, weight_decay=spec.weight_decay, warmup_steps=spec.warmup_steps,
                                          grad_clip=spec.grad_clip),
                        micro_batch_size=spec.micro_batch_size, micro_batch_tokens=spec.micro_batch_tokens,
                        mixed_precision=spec.mixed_precision)
    if world.is_main:
        for line in left_out:
            print(f"left out {line}", flush=True)
        print(f"{len(train)} training pairs, {len(val)} held-out pairs", flush=True)
    tracker = _tracker(spec, world, len(train), len(val))
    with tracker if tracker is not None else nullcontext():
        metrics = held_out_metrics(engine, val, tokenizer.pad_token_id, world)
        _log(tracker, world, metrics, step=0)
        steps_per_epoch = math.ceil(len(train) / spec.batch_size)
        step = 0
        for epoch in range(spec.epochs):
            order = np.random.default_rng(spec.seed + epoch).permutation(len(train))
            for first in range(0, len(train), spec.batch_size):
                step += 1
                chosen = [train[i] for i in order[first:first + spec.batch_size]]
                _log(tracker, world, train_step(engine, chosen, tokenizer.pad_token_id, world), step)
            metrics = held_out_metrics(engine, val, tokenizer.pad_token_id, world)
            _log(tracker, world, {**metrics, "rm/epoch": epoch + 1}, step)
        export = save_and_export(engine, tokenizer, Path(spec.out), step, asdict(spec), world)
        if world.is_main:
            print(f"trained {step} steps ({steps_per_epoch} per epoch); held-out pairwise accuracy "
                  f"{metrics['rm/val/acc']:.3f}; reward model in {export}", flush=True)
    return metrics


def _pairs(spec: RewardModelSpec, tokenizer) -> tuple[list[PreferencePair], list[PreferencePair], list[str]]:
    train, left_out = load_pairs(list(spec.train_files), tokenizer, spec.max_length)
    if spec.val_files:
        val, val_left_out = load_pairs(list(spec.val_files), tokenizer, spec.max_length)
        left_out += [f"{line} (held-out files)" for line in val_left_out]
    else:
        train, val = split_held_out(train, spec.val_fraction, spec.seed)
    if not train or not val:
        raise ValueError(f"{len(train)} training and {len(val)} held-out pairs: both need at least one "
                         f"({'; '.join(left_out) or 'check the files'})")
    return train, val, left_out


def train_step(engine: FSDPEngine, pairs: list[PreferencePair], pad_token_id: int, world: World) -> dict[str, float]:
    """One optimizer step on this rank's share of `pairs` (every rank takes part, so each needs at least one)."""
    mine = pairs[world.rank::world.size] or pairs[:1]
    batch = pair_batch(mine, pad_token_id)
    return engine.update(batch, pairwise_loss, mini_batch_size=len(batch))


def pairwise_loss(scores: torch.Tensor, micro, num_tokens: float, num_seqs: float):
    """This micro-batch's share of the mini-batch's mean Bradley-Terry loss; `num_seqs` counts rows, two a pair."""
    if not bool((micro[PAIR_KEY][0::2] == 1).all() and (micro[PAIR_KEY][1::2] == 0).all()):
        raise RuntimeError("a micro-batch broke its pairs: rows must alternate chosen, rejected")
    chosen, rejected = scores[0::2], scores[1::2]
    loss = bradley_terry_loss(chosen, rejected, num_pairs=num_seqs / 2)
    return loss, {"rm/loss": bradley_terry_loss(chosen, rejected).item(),
                  "rm/acc": pairwise_accuracy(chosen.detach(), rejected.detach()),
                  "rm/margin": (chosen - rejected).mean().item()}


def held_out_metrics(engine: FSDPEngine, pairs: list[PreferencePair], pad_token_id: int, world: World,
                     chunk: int = 64) -> dict[str, float]:
    """rm/val/acc (pairwise accuracy), rm/val/loss and rm/val/margin over every held-out pair. Each rank scores a
    contiguous share in as many calls as every other (FSDP's forwards are collectives; a rank whose share ran out
    scores one pair and drops it), and the shares are gathered, so the figures are over the whole set."""
    share = math.ceil(len(pairs) / world.size)
    mine = pairs[world.rank * share:(world.rank + 1) * share]
    scores = []
    for first in range(0, share, chunk):
        part = mine[first:first + chunk]
        scored = engine.compute_scores(pair_batch(part or pairs[:1], pad_token_id))
        scores.append(scored if part else scored[:0])
    scores = torch.cat(all_gather_object(torch.cat(scores)))
    chosen, rejected = scores[0::2], scores[1::2]
    return {"rm/val/acc": pairwise_accuracy(chosen, rejected), "rm/val/loss": bradley_terry_loss(chosen, rejected).item(),
            "rm/val/margin": (chosen - rejected).mean().item()}


def save_and_export(engine: FSDPEngine, tokenizer, out: Path, step: int, spec: dict, world: World) -> Path:
    """A trainer checkpoint (`<out>/checkpoints`), then on rank 0 its weights as a HF dir (`<out>/model`)."""
    checkpoints = CheckpointManager(out / "checkpoints", world)
    path = checkpoints.save(step, {ROLE: engine}, {"spec": spec},
                            {ROLE: lambda hf_dir: write_hf_files(engine.model, tokenizer, hf_dir)})
    export = out / "model"
    if world.is_main:
        merge_checkpoint(path, export, role=ROLE)
    return export


def _tracker(spec: RewardModelSpec, world: World, num_train: int, num_val: int) -> MLflowTracker | None:
    if not spec.tracking or not world.is_main:
        return None
    config = {"rm": {**asdict(spec), "train_pairs": num_train, "val_pairs": num_val}}
    return MLflowTracker(spec.mlflow_uri, spec.experiment, spec.run_name or f"rm-{Path(spec.out).name}", config,
                         seed=spec.seed)


def _log(tracker: MLflowTracker | None, world: World, metrics: dict[str, float], step: int) -> None:
    if tracker is not None:
        tracker.log_metrics(metrics, step=step)
    if world.is_main:
        shown = " ".join(f"{key}={value:.4g}" for key, value in sorted(metrics.items())
                         if key.startswith(("rm/loss", "rm/acc", "rm/val/")))
        print(f"step {step}: {shown}", flush=True)

