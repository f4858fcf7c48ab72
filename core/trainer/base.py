"""BaseTrainer: the RL loop of DESIGN.md §2, one method per step, so a recipe overrides only its delta.

`fit()` is the whole schedule; read it first. Every stage's output is checked against the data
contract (`Batch.check`) with the stage's name, so a shape bug names the stage that made it.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from functools import partial
from pathlib import Path

import numpy as np
import torch

from core.algos.actor_loss import OLD_FROM_UPDATE
from core.algos.advantages import ADV_ESTIMATORS
from core.algos.kl import kl_penalty
from core.algos.rollout_correction import NO_CORRECTION, rollout_correction_weights
from core.batch import Batch
from core.data.batch_file import save_batch
from core.engine.distributed import all_reduce_mean, all_reduce_sum
from core.reward.build import build_reward_manager
from core.reward.manager import reward_metrics, too_many_errors
from core.rollout.base import SamplingParams
from core.tracking.metrics import timed
from core.tracking.profiler import step_profiler
from core.trainer.config_checks import validate_config
from core.trainer.controllers import build_roles
from core.trainer.metrics import SUMMED_OVER_RANKS, data_metrics, logprob_diff_metrics, throughput_metrics
from core.trainer.preflight import check_data_file
from core.trainer.reward_sources import RewardSources
from core.trainer.run import TrainingRun
from core.trainer.schedule import SCHEDULES
from core.trainer.setup import build_components
from core.trainer.signals import deferred_stop
from core.trainer.stops import RunHalted
from core.trainer.timeline import WEIGHT_SYNC, Timeline
from core.trainer.tp_generation import TensorParallelGeneration
from core.trainer.validation import validate
from core.trainer.workers import mini_batch_rows


class BaseTrainer(TrainingRun):
    uses_critic = False  # PPO: a value model (`self.critic`) beside the actor, run by the same controller
    samples_dynamically = False  # DAPO: `algorithm.filter_groups` (its trainer's generate); others would ignore it

    def __init__(self, config):
        started, self.config = time.perf_counter(), config  # uses_reference reads the config
        parts = build_components(config, build_roles, with_reference=self.uses_reference, with_critic=self.uses_critic)
        super().__init__(config, parts, started)
        self.val_dataset = parts.val_dataset
        self.actor_rollout, self.critic = parts.actor_rollout, parts.critic
        self.reward_manager = build_reward_manager(config.reward, self.tokenizer)
        self.reward_sources = RewardSources(config.reward, self.tokenizer, parts.reward_model, parts.judge)
        self.schedule = SCHEDULES[config.trainer.schedule](self)  # which weights generate a step's rollouts
        # Under tensor parallelism each rank of a tp group generates its share of the group's prompts.
        self.tp_generation = TensorParallelGeneration(self.world, self.tokenizer.pad_token_id) \
            if TensorParallelGeneration.applies(self.world, config.trainer.schedule) else None
        self.timeline = Timeline(self.world, self.actor_rollout)  # who computes when, per step (timeline.py)

    # ---- what `recipezoo train` checks before anything starts ----------------------------------
    @staticmethod
    def check_config(config) -> None:
        validate_config(config)

    check_data_file = staticmethod(check_data_file)  # each data file: rows of prompts with the fields the config names

    @property
    def uses_reference(self) -> bool:
        return bool(self.config.actor.use_kl_loss or self.config.algorithm.use_kl_in_reward)

    # ---- the loop -----------------------------------------------------------------------------
    def fit(self) -> dict[str, float]:
        total, save_freq = self.config.trainer.total_steps, self.config.trainer.save_freq
        with (self.tracking, closed_at_exit(self.reward_manager), closed_at_exit(self.reward_sources),
              closed_at_exit(self.actor_rollout),
              closed_at_exit(self.schedule), deferred_stop(self.where_stopped) as stop_request):
            first_step, val_metrics = self.before_first_step()
            for step in range(first_step, total + 1):
                self.stop_if_signalled(stop_request, last_step=step - 1)  # SIGTERM/SIGINT (signals.py)
                self.global_step, self.timings, self.step_metrics = step, {}, {}
                with (step_profiler(self.config, step, self.world.rank, self.timings), timed("step", self.timings),
                      self.timeline.step(step)):
                    batch = self.stage("gen", self.schedule.next_rollout)  # draw prompts, generate (schedule.py)
                    batch = self.stage("reward", self.compute_rewards, batch)
                    batch = self.stage("old_log_prob", self.compute_log_probs, batch)
                    batch = self.stage("rollout_corr", self.correct_off_policy, batch)
                    batch = self.stage("values", self.compute_values, batch)
                    batch = self.stage("adv", self.compute_advantages, batch)
                    if step == self.config.trainer.save_batch_step:
                        self.save_batch(step, batch)
                    metrics = self.stage("update_critic", self.update_critic, batch)
                    metrics |= self.stage("update_actor", self.update_policy, batch)
                    # A run stopping after this step needs its engine no more, whose processes may have had the
                    # same signal (a process group's, a scheduler's): no sync, no validation to wait on them.
                    stopping = stop_request.agreed(self.world) is not None
                    if not stopping:
                        self.stage("sync_weights", self.sync_weights)
                self.log_step(step, batch, metrics)  # and stops a runaway run (guards.py)
                if not stopping and self._due(step, self.config.trainer.test_freq, total):
                    val_metrics = self.validate(step)
                if self._due(step, save_freq, total):
                    self.save_checkpoint(step)
            self.stop_if_signalled(stop_request, last_step=total)  # a signal during the last step
            self.write_timeline()
        return val_metrics

    def stage(self, name: str, method, *args):
        """Run one step of the loop: timed, and its output batch checked against the contract."""
        with timed(name, self.timings), self.timeline.stage(name):
            result = method(*args)
        if isinstance(result, Batch):
            expected = len(args[0]) if name != "gen" else None
            result.check(name, expected_size=expected)
        return result

    # ---- the steps: override what your algorithm changes ---------------------------------------
    def generate(self, prompts: Batch, params: SamplingParams | None = None) -> Batch:
        """n samples per prompt; each prompt's samples share a `uid` (its group). `params`: the step's
        sampling by default; partial rollouts (core/rollout/partial.py) pass a shorter token budget, and
        the async schedule's streamed parts a seed of their own."""
        prompts.non_tensors["uid"] = np.array([f"{i}" for i in prompts["index"]], dtype=object)
        params = params or self.sampling_params()
        if self.tp_generation is not None:
            return self.tp_generation.generate(self.actor_rollout.generate, prompts, params)
        return self.actor_rollout.generate(prompts, params)

    def compute_rewards(self, batch: Batch) -> Batch:
        scores, info = self.reward_manager(batch)
        failure = too_many_errors(self.reward_manager, list(batch.non_tensors.get("data_source", [])), info,
                                  self.config.reward.max_error_frac)
        if failure:
            raise RunHalted(f"stopped at step {self.global_step}: {failure}")
        for key, count in reward_metrics(info).items():  # summed: DAPO scores several batches a step
            self.step_metrics[key] = self.step_metrics.get(key, 0) + count
        if not self.reward_sources.only_rule:  # a reward model or judge, or a weighted rule (docs/rewards.md)
            scores, metrics = self.reward_sources.mixed(batch, scores)
            for key, value in metrics.items():  # counts summed: DAPO scores several batches a step
                self.step_metrics[key] = self.step_metrics.get(key, 0) + value if key in SUMMED_OVER_RANKS else value
        batch.tensors["token_level_scores"] = scores
        batch.non_tensors["acc"] = np.asarray(info["acc"], dtype=object)  # the rule's: whether the answer is right
        return batch

    def compute_log_probs(self, batch: Batch) -> Batch:
        bypass = self.config.algorithm.rollout_correction.bypass_mode
        if bypass:  # π_old = the sampling engine's log-probs (its numerics, not the trainer's)
            batch.tensors["old_log_probs"] = batch["rollout_log_probs"]
            if self.uses_reference:
                batch = batch.union(self.actor_rollout.compute_ref_log_probs(batch), stage="old_log_prob")
        else:
            batch = self.old_policy_log_probs(batch, self.old_log_probs_from_update(batch))
        rewards = batch["token_level_scores"]
        if self.config.algorithm.use_kl_in_reward:
            kl = kl_penalty(batch["old_log_probs"], batch["ref_log_probs"], self.config.algorithm.kl_penalty)
            rewards = rewards - self.config.algorithm.kl_coef * kl * batch["response_mask"]
        batch.tensors["token_level_rewards"] = rewards
        return batch

    def old_policy_log_probs(self, batch: Batch, from_update: int) -> Batch:
        """π_old (and the reference's log-probs) of `batch`: one forward over every row past the first
        `from_update`, whose π_old the update's own first forward gives; those rows are marked
        (OLD_FROM_UPDATE) and their `old_log_probs` hold zeros until the loss replaces them."""
        if from_update >= len(batch):  # one optimizer step: no old_log_probs at all
            if self.uses_reference:
                batch = batch.union(self.actor_rollout.compute_ref_log_probs(batch), stage="old_log_prob")
            return batch
        rows = np.arange(len(batch))
        later = batch.select(rows[from_update:]) if from_update else batch  # no copy when every row needs π_old
        computed = self.actor_rollout.compute_log_probs(later)
        if self.config.rollout.calculate_log_probs:
            self.step_metrics.update(logprob_diff_metrics(later.union(computed, stage="old_log_prob")))
        if not from_update:
            return batch.union(computed, stage="old_log_prob")
        first = {"old_log_probs": computed["old_log_probs"].new_zeros((from_update, *computed["old_log_probs"].shape[1:]))}
        if self.uses_reference:
            first["ref_log_probs"] = self.actor_rollout.compute_ref_log_probs(batch.select(rows[:from_update]))[
                "ref_log_probs"]
        tensors = {key: torch.cat([first[key], computed[key]]) for key in first}
        tensors[OLD_FROM_UPDATE] = torch.as_tensor(rows < from_update)  # (B,) bool
        return batch.union(Batch(tensors), stage="old_log_prob")

    def old_log_probs_from_update(self, batch: Batch) -> int:
        """How many leading rows of `batch` take π_old from the update's own first forward instead of a forward
        before it: the first optimizer step runs on the very weights that generated the batch, so π_old of its
        rows is that forward's output, detached. Every row when one optimizer step covers the batch; the first
        mini-batch's when several do (each later one needs π_old before the first step changes the weights), under
        the local controller.
        None with several epochs, KL in the reward or a rollout correction, which need π_old before the update,
        nor with `actor.recompute_old_log_probs=always`."""
        actor = self.config.actor
        if actor.recompute_old_log_probs not in ("auto", "always"):
            raise ValueError(f"actor.recompute_old_log_probs={actor.recompute_old_log_probs!r}: expected auto or always")
        if (actor.recompute_old_log_probs != "auto" or actor.ppo_epochs != 1 or self.config.algorithm.use_kl_in_reward
                or self.config.algorithm.rollout_correction.mode != NO_CORRECTION):
            return 0
        # `batch` is this rank's part under torchrun (the whole batch on a Ray driver, whose world is one
        # rank), so it is compared with this rank's share of a mini-batch, as the engine splits it.
        rows = mini_batch_rows(self.config, self.world)
        if len(batch) <= rows:
            return len(batch)
        # Only where this process's rows are the update's: a Ray group splits the batch among its workers, each
        # of whose first mini-batch is a slice of its own part, not the batch's first rows.
        return rows if self.config.trainer.controller == "local" else 0

    def correct_off_policy(self, batch: Batch) -> Batch:
        """Importance weights π_old/π_rollout for the policy loss (`algorithm.rollout_correction`): the
        rollout's tokens came from another engine's numerics, or from older weights off-policy."""
        correction = self.config.algorithm.rollout_correction
        if correction.mode == NO_CORRECTION:
            return batch
        weights, metrics = rollout_correction_weights(
            batch["old_log_probs"], batch["rollout_log_probs"], batch["response_mask"], mode=correction.mode,
            tis_cap=correction.tis_cap, mask_low=correction.mask_low, mask_high=correction.mask_high)
        batch.tensors["rollout_is_weights"] = weights  # (B, T_resp)
        self.step_metrics.update(metrics)
        return batch

    def compute_values(self, batch: Batch) -> Batch:
        return batch  # critic-free algorithms; PPO overrides

    def compute_advantages(self, batch: Batch) -> Batch:
        algo = self.config.algorithm
        advantages, returns = ADV_ESTIMATORS.get(algo.adv_estimator)(
            token_level_rewards=batch["token_level_rewards"], response_mask=batch["response_mask"],
            group_ids=batch["uid"], values=batch.tensors.get("values"), gamma=algo.gamma, lam=algo.lam,
            norm_adv_by_std=algo.norm_adv_by_std_in_grpo,
            # Whitening uses the whole step batch, however the controller split it: torchrun's ranks each
            # hold a part; a Ray driver holds all of it and its one-rank group sums nothing.
            sum_over_ranks=partial(all_reduce_sum, device=self.world.device, group=self.world.dp_group),
        )
        batch.tensors["advantages"], batch.tensors["returns"] = advantages, returns
        return batch

    def save_batch(self, step: int, batch: Batch) -> None:
        """`trainer.save_batch_step`: the step's batch, rewards computed, for computing its numerics in another
        framework (bench/verl/numerics.py). Rank 0 writes its own rows: under torchrun each rank holds whole
        prompt groups, so its share is a batch in itself; a Ray driver holds all of them."""
        if self.world.rank == 0:
            path = save_batch(batch, Path(self.config.trainer.save_batch_dir) / f"batch_step{step}.pt")
            print(f"saved step {step}'s batch ({len(batch)} rows) to {path}", flush=True)

    def update_critic(self, batch: Batch) -> dict[str, float]:
        return {}

    def update_policy(self, batch: Batch) -> dict[str, float]:
        return self.actor_rollout.update_policy(batch)

    def sync_weights(self) -> None:
        # The schedule waits for a rollout still generating on the old weights; the span starts after it.
        with self.schedule.weight_sync(), self.timeline.span("sync_weights", WEIGHT_SYNC):
            self.actor_rollout.sync_weights()

    # ---- checkpoints and resume (core/trainer/run.py) ----------------------------------------
    def checkpoint_engines(self) -> dict:
        """role -> engine whose weights, optimizer and schedule a checkpoint holds (PPO adds its critic)."""
        return {"actor": self.actor_rollout.actor}

    def loader_state(self) -> dict:
        return self.schedule.loader_state()  # the prompts an off-policy schedule has drawn ahead are not trained yet

    def after_resume(self) -> None:
        self.sync_weights()  # the rollout engine still holds the initial weights

    def write_timeline(self) -> None:
        self.timeline.write(self.tracking, self.world, self.config.trainer.output_dir)

    # ---- around the loop ----------------------------------------------------------------------
    def sampling_params(self, validation: bool = False) -> SamplingParams:
        r, step = self.config.rollout, self.train_loader.offset
        if validation:
            return SamplingParams(n=r.val_n, temperature=r.val_temperature, top_p=r.top_p, top_k=r.top_k,
                                  max_new_tokens=self.config.data.max_response_length, log_probs=False)
        # A distinct, reproducible seed per (run seed, data position, dp rank); a tp group's ranks share it, and
        # under sync each generates its share of the prompts from it (tp_generation.py).
        seed = self.config.trainer.seed * 1_000_003 + step * 97 + self.world.dp_rank if r.seed_each_call else None
        return SamplingParams(n=r.n, temperature=r.temperature, top_p=r.top_p, top_k=r.top_k,
                              max_new_tokens=self.config.data.max_response_length, seed=seed,
                              log_probs=r.calculate_log_probs)

    def validate(self, step: int) -> dict[str, float]:
        if not self.config.trainer.test_freq:
            return {}
        with timed("testing", self.timings), self.schedule.rollout_engine():
            metrics = validate(self.actor_rollout.generate, self.reward_manager, self.val_dataset,
                               self.sampling_params(validation=True), self.world)
        self.tracking.log_metrics(metrics, step=step)
        self.val_history.append((step, metrics))
        return metrics

    def log_step(self, step: int, batch: Batch, metrics: dict[str, float]) -> None:
        """Log the step's metrics, averaged over ranks; then check them (`StepGuard`), on every rank alike."""
        metrics = {**metrics, **self.step_metrics}
        metrics.update(data_metrics(batch, self.config.data.max_response_length))
        metrics.update(throughput_metrics(batch, self.timings["timing_s/step"]))
        # Per device, as verl reports: a Ray driver holds the whole batch of all its workers, on every device.
        metrics["perf/throughput"] /= getattr(self.actor_rollout, "num_devices", 1)
        metrics = all_reduce_mean(metrics, self.world.device)
        for key in SUMMED_OVER_RANKS:
            if key in metrics:  # every rank logs the same keys (all_reduce_mean needs it); some only some recipes
                metrics[key] *= self.world.dp_size  # tp ranks of a dp group count the same rows
        metrics.update(self.timings)
        metrics.update(self.start_record)  # this process's start, with its first step (rank 0's, as logged)
        self.start_record = {}
        metrics["training/epoch"] = batch.meta.get("epoch", 0)
        self.tracking.log_metrics(metrics, step=step)
        self.guard.check(step, metrics)


@contextmanager
def closed_at_exit(resource):
    """Call `resource.close()` on leaving, if it has one (a pool reward manager's processes, a Ray group)."""
    try:
        yield resource
    finally:
        if hasattr(resource, "close"):
            resource.close()
