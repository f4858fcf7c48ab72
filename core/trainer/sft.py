"""SFTTrainer: supervised fine-tuning on the RL actor's engine, as a loss function and a small loop.

    for each step: draw data.train_batch_size examples -> one optimizer step on their masked NLL -> log

The step is `FSDPEngine.update` with `make_sft_loss` in place of the actor loss, so SFT runs on exactly the
engine RL trains with (FSDP2, packing, token-budget micro-batches, compiled blocks, chunked log-probs, LoRA).
What every run shares comes from `TrainingRun`: checkpoints (resumed bit for bit, checksummed), signal stops,
the first validation, tracking. A checkpoint of this trainer is a `model.path` an RL run starts from
(core/trainer/checkpoint_export.py), and `recipezoo merge` exports it as it does an RL one.

A trainer with another supervised objective keeps this loop and overrides `make_loss` (and its data, in
core/trainer/sft_setup.py): validation here is the held-out loss of the same objective.
"""

from __future__ import annotations

import time

import torch

from core.algos.sft_loss import make_sft_loss
from core.data.sft_dataset import SFTItem, collate_sft
from core.engine.distributed import all_reduce_mean, all_reduce_sum
from core.tracking.metrics import timed
from core.tracking.profiler import step_profiler
from core.trainer.metrics import SUMMED_OVER_RANKS, FlopsShape, peak_flops, update_throughput_metrics
from core.trainer.run import TrainingRun
from core.trainer.sft_setup import build_sft_components, check_sft_config, check_sft_file, sft_plan

VAL_ROWS = 256  # held-out examples per forward call (the engine micro-batches each call)


class SFTTrainer(TrainingRun):
    def __init__(self, config):
        started = time.perf_counter()
        parts = build_sft_components(config)
        super().__init__(config, parts, started)
        self.engine, self.val_dataset = parts.engine, parts.val_dataset
        self.loss_fn = self.make_loss()
        self.flops_shape, self.peak_flops = FlopsShape.of(self.engine.model), peak_flops(self.world.device)

    # ---- what `recipezoo sft` checks before anything starts ----------------------------------------
    @staticmethod
    def check_config(config) -> None:
        check_sft_config(config)

    check_data_file = staticmethod(check_sft_file)
    dry_run_plan = staticmethod(sft_plan)

    # ---- the loop -----------------------------------------------------------------------------
    def make_loss(self):
        """The engine's loss function (log_probs, entropy, micro, num_tokens, num_seqs) -> (loss, metrics)."""
        return make_sft_loss(self.config.actor.loss_agg_mode, self.config.data.max_response_length)

    def train_one_step(self, step: int) -> None:
        with step_profiler(self.config, step, self.world.rank, self.timings), timed("step", self.timings):
            with timed("data", self.timings):
                batch = next(self.train_loader)
            with timed("update_actor", self.timings):
                metrics = self.train_step(batch)
        self.log_step(step, batch, metrics)

    def train_step(self, batch) -> dict[str, float]:
        """One optimizer step over this rank's share of the step's examples."""
        return self.engine.update(batch, self.loss_fn, mini_batch_size=len(batch))

    def log_step(self, step: int, batch, metrics: dict[str, float]) -> None:
        """The step's metrics, averaged over ranks (token counts summed); then checked (`StepGuard`)."""
        metrics = {**metrics, **self.step_metrics, **example_metrics(batch)}
        metrics.update(update_throughput_metrics(batch, self.timings["timing_s/step"], self.flops_shape,
                                                 self.peak_flops))
        metrics = all_reduce_mean(metrics, self.world.device)
        for key in (*SUMMED_OVER_RANKS, "sft/loss_tokens"):
            if key in metrics:
                metrics[key] *= self.world.dp_size
        metrics.update(self.timings)
        metrics.update(self.start_record)
        self.start_record = {}
        metrics["training/epoch"] = batch.meta.get("epoch", 0)
        self.tracking.log_metrics(metrics, step=step)
        self.guard.check(step, metrics)

    # ---- the hooks of TrainingRun ---------------------------------------------------------------
    def checkpoint_engines(self) -> dict:
        return {"actor": self.engine}

    def validate(self, step: int) -> dict[str, float]:
        """`val/sft_loss`: the objective's token mean over the held-out examples (data.val_files)."""
        if self.val_dataset is None:
            return {}
        with timed("testing", self.timings):
            nll, tokens = held_out_nll(self.engine, self.val_dataset.items, self.val_dataset.pad_token_id, self.world)
        metrics = {"val/sft_loss": nll / max(tokens, 1.0), "val/sft_loss_tokens": tokens}
        self.tracking.log_metrics(metrics, step=step)
        self.val_history.append((step, metrics))
        return metrics


def example_metrics(batch) -> dict[str, float]:
    """This rank's examples: trained tokens, and prompt and response lengths (mean, max)."""
    prompts = batch["attention_mask"][:, : batch["prompts"].shape[1]].sum(-1).float()
    responses = batch["attention_mask"][:, batch["prompts"].shape[1]:].sum(-1).float()
    return {"sft/loss_tokens": float(batch["response_mask"].sum()),
            "prompt_length/mean": prompts.mean().item(), "prompt_length/max": prompts.max().item(),
            "response_length/mean": responses.mean().item(), "response_length/max": responses.max().item()}


def held_out_nll(engine, items: list[SFTItem], pad_token_id: int, world) -> tuple[float, float]:
    """(Σ −log p over the trained tokens, their count) of `items`, over all ranks: each takes every world-size-th
    example, in as many forward calls as the others (the engine's forwards are collective), a rank with one
    example fewer padding its share with an example that trains no token."""
    share = items[world.dp_rank::world.dp_size]
    longest = -(-len(items) // world.dp_size)
    filler = SFTItem(items[0].prompt_ids, items[0].response_ids, [0] * len(items[0].loss_mask))
    share = share + [filler] * (longest - len(share))
    nll, tokens = torch.zeros((), dtype=torch.float64), torch.zeros((), dtype=torch.float64)
    for start in range(0, longest, VAL_ROWS):
        batch = collate_sft(share[start:start + VAL_ROWS], pad_token_id)
        log_probs = engine.compute_log_probs(batch)  # (B, T_resp), zero off the trained tokens
        nll -= log_probs.double().sum()
        tokens += batch["response_mask"].sum()
    return (all_reduce_sum(float(nll), world.device, world.dp_group),
            all_reduce_sum(float(tokens), world.device, world.dp_group))
