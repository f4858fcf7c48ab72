"""The cross-field rules of the schedules off the synchronous path (one_step_off, async, partial rollouts,
streamed groups), of what reads the engine's log-probs, and of rollout engines placed in workers of their own:
part of config_checks.py's one check before anything starts, each failure one `ConfigError` line."""

from __future__ import annotations

from core.algos.rollout_correction import NO_CORRECTION
from core.config import ConfigError, lookup
from core.trainer.schedule import SCHEDULES


def check_schedule(resolved: dict) -> None:
    """What cannot run off-policy, or beside a training step: refused by every schedule but `sync`."""
    schedule = resolved["trainer"]["schedule"]
    if resolved["trainer"]["partial_rollout"] and schedule != "async":
        raise ConfigError(f"trainer.partial_rollout=true with trainer.schedule={schedule} — partial rollouts "
                          "resume a generation on newer weights, which only the async schedule allows; set "
                          "trainer.schedule=async or trainer.partial_rollout=false")
    if schedule == "sync":
        return
    refusals = {
        "algorithm.adv_estimator": (resolved["algorithm"]["adv_estimator"] == "remax",
                                    "ReMax's greedy baseline must come from the weights being trained"),
        "algorithm.filter_groups.enable": (resolved["algorithm"]["filter_groups"]["enable"],
                                           "DAPO's dynamic sampling draws and scores more prompts inside the "
                                           "rollout, which then runs beside the training step"),
        "rollout.tensor_model_parallel_size": (resolved["rollout"]["tensor_model_parallel_size"] > 1,
                                               "tensor-parallel engines synchronise their ranks mid-generation, "
                                               "untested beside a training step"),
    }
    for key, (refused, why) in refusals.items():
        if refused:
            raise ConfigError(f"{key}={lookup(resolved, key)!r} with trainer.schedule={schedule} — {why}; "
                              "run it with trainer.schedule=sync")

def check_max_staleness(resolved: dict) -> None:
    """A bound given to a schedule that would ignore it: its default is null so that a set one can be told apart."""
    bound, schedule = resolved["trainer"]["max_staleness"], resolved["trainer"]["schedule"]
    if bound is not None and schedule != "async":
        raise ConfigError(f"trainer.max_staleness={bound} with trainer.schedule={schedule} — only the async schedule "
                          f"reads it ({schedule}'s staleness is fixed at {SCHEDULES[schedule].max_staleness}); set "
                          "trainer.schedule=async or leave trainer.max_staleness unset (null)")

def check_stream_groups(resolved: dict) -> None:
    groups, schedule = resolved["trainer"]["stream_groups"], resolved["trainer"]["schedule"]
    if groups is None:
        return
    if schedule != "async":
        raise ConfigError(f"trainer.stream_groups={groups} with trainer.schedule={schedule} — streaming groups is "
                          "part of the async schedule; set trainer.schedule=async or trainer.stream_groups=null")
    batch_size = resolved["data"]["train_batch_size"]
    if groups > batch_size:
        raise ConfigError(f"trainer.stream_groups={groups} is more than data.train_batch_size={batch_size} — "
                          f"expected at most the {batch_size} groups of one step, or null for a whole batch per call")

def check_rollout_log_probs(resolved: dict) -> None:
    """What reads the engine's per-token log-probs cannot run without them."""
    if resolved["rollout"]["calculate_log_probs"]:
        return
    readers = {
        "algorithm.rollout_correction.mode": (resolved["algorithm"]["rollout_correction"]["mode"] != NO_CORRECTION,
                                              "its importance weights are π_old / π_rollout"),
        "algorithm.rollout_correction.bypass_mode": (resolved["algorithm"]["rollout_correction"]["bypass_mode"],
                                                     "π_old is the engine's log-probs"),
        "trainer.partial_rollout": (resolved["trainer"]["partial_rollout"],
                                    "a resumed response keeps the log-probs of the weights that sampled its start"),
    }
    for key, (reads, why) in readers.items():
        if reads:
            raise ConfigError(f"{key}={lookup(resolved, key)!r} with rollout.calculate_log_probs=false — {why}; "
                              "set rollout.calculate_log_probs=true")

def check_placement(resolved: dict) -> None:
    """What cannot run with the rollout engines in workers of their own (`trainer.placement=disaggregated`).
    Whether the Ray cluster has the devices is checked once connected, before any worker starts."""
    trainer, rollout = resolved["trainer"], resolved["rollout"]
    if trainer["placement"] == "colocated":
        return
    lora = resolved["actor"]["lora"]
    refusals = {
        "trainer.controller": (trainer["controller"] != "ray",
                               "rollout workers of their own are Ray actors; set trainer.controller=ray"),
        "rollout.name": (rollout["name"] == "sglang",
                         "the weight stream loads into hf and vllm engines; use rollout.name=hf or vllm"),
        "rollout.tensor_model_parallel_size": (rollout["tensor_model_parallel_size"] > 1,
                                               "each rollout worker runs a one-device engine; set it to 1 and "
                                               "raise trainer.rollout_workers"),
        "actor.lora.sync": (lora["rank"] is not None and lora["sync"] == "adapter",
                            "an adapter goes to the engine through files; use actor.lora.sync=merged, whose "
                            "merged weights are streamed"),
    }
    for key, (refused, why) in refusals.items():
        if refused:
            raise ConfigError(f"{key}={lookup(resolved, key)!r} with trainer.placement=disaggregated — {why}")
