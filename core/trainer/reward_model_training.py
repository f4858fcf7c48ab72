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
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
from omegaconf import OmegaConf

from core.algos.bradley_terry import bradley_terry_loss, pairwise_accuracy
from core.config import ConfigError
from core.data.preference import PAIR_KEY, PreferencePair, load_pairs, pair_batch, split_held_out
from core.engine.distributed import World, all_gather_object, init_distributed
from core.engine.fsdp import FSDPEngine, OptimConfig
from core.models.loading import load_tokenizer, resolve_model_path
from core.models.reward_model import load_reward_model
from core.tracking.mlflow_tracker import MLflowTracker
from core.tracking.tracker import Tracking
from core.trainer.checkpoint import CheckpointError, read_trainer_state, resolve_resume
from core.trainer.checkpoint_export import merge_checkpoint
from core.trainer.resume import decided_on_main
from core.trainer.run import TrainingRun
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
    resume: str = "disable"  # auto (the newest valid checkpoint under <out>/checkpoints) | disable | a checkpoint
    save_freq: int = 0  # a checkpoint every this many steps; 0: at the last step only (always, for the export)
    keep_checkpoints: int = 0  # keep the newest this many; 0: all


def check_spec(spec: RewardModelSpec) -> None:
    """Every number in range and every file there: one line naming the flag, before any model or run exists."""
    for flag, value, low in (("--epochs", spec.epochs, 1), ("--batch-size", spec.batch_size, 1),
                             ("--micro-batch-size", spec.micro_batch_size, 2), ("--max-length", spec.max_length, 2)):
        if value < low:
            raise ValueError(f"{flag}={value}: must be at least {low}")
    for flag, value in (("--save-freq", spec.save_freq), ("--keep-checkpoints", spec.keep_checkpoints)):
        if value < 0:
            raise ValueError(f"{flag}={value}: must be at least 0")
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
    """Train (or continue a checkpoint's training, `spec.resume`), save and export; returns the last held-out
    metrics (rm/val/acc, rm/val/loss)."""
    return RewardModelRun(spec).fit()


class RewardModelRun(TrainingRun):
    """The Bradley-Terry loop on what every trainer's run shares (core/trainer/run.py): checkpoints with
    checksums, a bit-exact resume (weights, optimizer, lr schedule, RNG, data position, the MLflow run) and a
    SIGTERM/SIGINT stop at a step boundary that saves first. Held-out metrics are its validation, at step 0
    and after each epoch."""

    RESUME_FLAG = "--resume"
    MORE_STEPS_HINT = "raise --epochs"

    def __init__(self, spec: RewardModelSpec):
        started = time.perf_counter()
        check_spec(spec)
        self.spec = spec
        world = init_distributed(spec.device)
        resume = decided_on_main(world, lambda: plan_rm_resume(spec))
        model_path = resolve_model_path(spec.model)
        tokenizer = load_tokenizer(model_path)
        train, self.val_pairs, left_out = _pairs(spec, tokenizer)
        loader = PairLoader(train, spec.batch_size, spec.seed)
        config = run_config(spec, loader.steps_per_epoch)
        seed_everything(spec.seed)
        self.engine = FSDPEngine(load_reward_model(model_path, fresh_head=True), world, head="reward",
                                 optim=OptimConfig(lr=spec.lr, weight_decay=spec.weight_decay,
                                                   warmup_steps=spec.warmup_steps, grad_clip=spec.grad_clip),
                                 micro_batch_size=spec.micro_batch_size, micro_batch_tokens=spec.micro_batch_tokens,
                                 mixed_precision=spec.mixed_precision)
        if world.is_main:
            for line in left_out:
                print(f"left out {line}", flush=True)
            print(f"{len(train)} training pairs, {len(self.val_pairs)} held-out pairs", flush=True)
        tracking = Tracking(_tracker(spec, world, len(train), len(self.val_pairs), resume))
        parts = SimpleNamespace(world=world, tokenizer=tokenizer, train_loader=loader, tracking=tracking,
                                resume_from=resume.path if resume else None, start_record={})
        super().__init__(config, parts, started)
        self.pad_token_id = tokenizer.pad_token_id

    def train_one_step(self, step: int) -> None:
        metrics = train_step(self.engine, next(self.train_loader), self.pad_token_id, self.world)
        _log(self.tracking, self.world, metrics, step)

    def finish_training(self, val_metrics: dict[str, float]) -> dict[str, float]:
        """The last checkpoint exported as a HF dir (`<out>/model`), which `reward.model.path` loads."""
        val_metrics = val_metrics or (self.val_history[-1][1] if self.val_history else {})
        export = Path(self.spec.out) / "model"
        if self.world.is_main:
            merge_checkpoint(self.last_saved[1], export, role=ROLE)
            print(f"trained {self.config.trainer.total_steps} steps ({self.train_loader.steps_per_epoch} per "
                  f"epoch); held-out pairwise accuracy {val_metrics['rm/val/acc']:.3f}; reward model in {export}",
                  flush=True)
        return val_metrics

    def checkpoint_engines(self) -> dict:
        return {ROLE: self.engine}

    def validate(self, step: int) -> dict[str, float]:
        metrics = held_out_metrics(self.engine, self.val_pairs, self.pad_token_id, self.world)
        metrics["rm/epoch"] = step / self.train_loader.steps_per_epoch
        _log(self.tracking, self.world, metrics, step)
        self.val_history.append((step, metrics))
        return metrics


class PairLoader:
    """The training pairs, `batch_size` a step, each epoch in an order of its own drawn from `seed`; its
    position (the steps drawn) is a checkpoint's data position."""

    def __init__(self, pairs: list[PreferencePair], batch_size: int, seed: int):
        self.pairs, self.batch_size, self.seed = pairs, batch_size, seed
        self.steps_per_epoch, self.steps_drawn = math.ceil(len(pairs) / batch_size), 0

    def __next__(self) -> list[PreferencePair]:
        epoch, index = divmod(self.steps_drawn, self.steps_per_epoch)
        order = np.random.default_rng(self.seed + epoch).permutation(len(self.pairs))
        self.steps_drawn += 1
        return [self.pairs[i] for i in order[index * self.batch_size:(index + 1) * self.batch_size]]

    def state_dict(self) -> dict:
        return {"steps_drawn": self.steps_drawn, "dataset_size": len(self.pairs), "batch_size": self.batch_size,
                "seed": self.seed}

    def load_state_dict(self, state: dict) -> None:
        if state["dataset_size"] != len(self.pairs):
            raise CheckpointError(f"the checkpoint's data position is over {state['dataset_size']} training pairs, "
                                  f"these files give {len(self.pairs)} — resume with the same --train-files")
        self.steps_drawn = state["steps_drawn"]


FROZEN_ON_RESUME = {  # spec field -> its flag; a resume continues a place in the data order these fix
    "model": "--model", "train_files": "--train-files", "val_files": "--val-files", "val_fraction": "--val-fraction",
    "batch_size": "--batch-size", "max_length": "--max-length", "seed": "--seed",
}


def plan_rm_resume(spec: RewardModelSpec) -> SimpleNamespace | None:
    """The checkpoint `spec.resume` names, verified against its checksums, with its step and MLflow run;
    a flag a resume cannot take a new value of is refused naming it. None: a fresh run."""
    path = resolve_resume(spec.resume, Path(spec.out) / "checkpoints", flag="--resume")
    if path is None:
        return None
    state = read_trainer_state(path)
    saved, now = state["config"]["rm"], _plain(asdict(spec))
    for field, flag in FROZEN_ON_RESUME.items():
        if saved.get(field) != now[field]:
            raise ConfigError(f"{flag}={now[field]!r} but the checkpoint {path} was written with {flag}="
                              f"{saved.get(field)!r}; resume with the same {flag}, or start fresh with --resume=disable")
    return SimpleNamespace(path=path, step=int(state["step"]), mlflow_run_id=state.get("mlflow_run_id"))


def run_config(spec: RewardModelSpec, steps_per_epoch: int):
    """The keys `TrainingRun` reads, from the flags; `rm` holds the flags themselves (a checkpoint keeps them)."""
    total = steps_per_epoch * spec.epochs
    return OmegaConf.create({
        "rm": _plain(asdict(spec)),
        "trainer": {"checkpoint_dir": str(Path(spec.out) / "checkpoints"), "max_ckpt_to_keep": spec.keep_checkpoints,
                    "max_bad_steps": 0, "test_freq": steps_per_epoch, "val_before_train": True, "total_steps": total,
                    "save_freq": spec.save_freq or total, "save_on_signal": True},
        "actor": {"lr": spec.lr}, "data": {"max_response_length": spec.max_length}})


def _plain(fields: dict) -> dict:
    return {key: list(value) if isinstance(value, tuple) else value for key, value in fields.items()}


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


def _tracker(spec: RewardModelSpec, world: World, num_train: int, num_val: int, resume) -> list[MLflowTracker]:
    """Rank 0's MLflow run (none with --no-mlflow); a resume continues the checkpoint's run."""
    if not spec.tracking or not world.is_main:
        return []
    config = {"rm": {**asdict(spec), "train_pairs": num_train, "val_pairs": num_val}}
    return [MLflowTracker(spec.mlflow_uri, spec.experiment, spec.run_name or f"rm-{Path(spec.out).name}", config,
                          seed=spec.seed, resume_run_id=resume.mlflow_run_id if resume else None,
                          resume_step=resume.step if resume else 0)]


def _log(tracking: Tracking, world: World, metrics: dict[str, float], step: int) -> None:
    tracking.log_metrics(metrics, step=step)
    if world.is_main:
        shown = " ".join(f"{key}={value:.4g}" for key, value in sorted(metrics.items())
                         if key.startswith(("rm/loss", "rm/acc", "rm/val/")))
        print(f"step {step}: {shown}", flush=True)

