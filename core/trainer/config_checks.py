"""One check of a resolved config before anything starts: types, ranges and cross-field rules.

`recipezoo train` runs it before the trainer is built, so a bad config creates no MLflow run and no
output dir; `--dry-run` runs the same check at the world size the config asks for. A failure is one
`ConfigError` line naming the key, the value and what is expected.

Types come from base.yaml: a key whose default is an integer takes an integer, a float default takes
any number, and so on; the keys whose default cannot tell, and the ranges, are core/config/schema.py's.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from core.algos.advantages import ADV_ESTIMATORS, SEQUENCE_LEVEL_ESTIMATORS
from core.algos.aggregation import AGG_MODES
from core.algos.importance_losses import SEQUENCE_LEVEL_LOSSES
from core.algos.kl import KL_ESTIMATORS
from core.algos.policy_loss import POLICY_LOSSES
from core.algos.rollout_correction import NO_CORRECTION, ROLLOUT_CORRECTIONS
from core.config import CONFIG_DIR, MISSING, ConfigError, lookup
from core.config.schema import KINDS, KINDS_BEYOND_DEFAULT, RANGE_TESTS, RANGES
from core.data.dataset import TRUNCATION_MODES
from core.models.loading import VALUE_HEAD_INITS
from core.models.lora import LoraSpec, check_targets
from core.models.random_init import MODEL_INITS
from core.reward.build import MANAGERS
from core.reward.gsm8k import GSM8K_METHODS
from core.reward.judge import check_parser, check_template
from core.reward.mixing import source_weights
from core.rollout.multi_turn.actions import FORMATS as ACTION_FORMATS
from core.rollout.multi_turn.settings import check_multi_turn
from core.tracking.tracker import backend_names
from core.trainer.schedule import SCHEDULES
from core.trainer.schedule_checks import (
    check_max_staleness,
    check_placement,
    check_rollout_log_probs,
    check_schedule,
    check_stream_groups,
)

ROLLOUT_PACKAGES = {"hf": None, "vllm": "vllm", "sglang": "sglang"}  # backend -> the package it needs
CONTROLLER_PACKAGES = {"local": None, "ray": "ray"}
PLACEMENTS = ("colocated", "disaggregated")  # trainer.placement: where the rollout engines run
# Advantages that compare the n samples of one prompt.
GROUP_ESTIMATORS = ("grpo", "rloo", "reinforce_plus_plus_baseline", "opo", "grpo_passk", "gpg")
CRITIC_ESTIMATORS = ("gae",)  # advantages that need PPO's value model
REWARD_MODEL_PLACEMENTS = ("colocated", "separate")  # reward.model.placement
CORRECTED_LOSSES = ("vanilla", "ppo_clip")  # losses that take the off-policy correction's token_weights

def checked_common(config, world: tuple[int, str] | None = None) -> tuple[dict, int, str]:
    """The checks every trainer's config takes (types, choices, ranges, parallelism over `world`, default this
    launch's): the resolved config, the number of ranks and where that number comes from."""
    resolved = resolved_config(config)
    check_types(resolved)
    check_choices(resolved)
    check_ranges(resolved)
    size, source = world or launch_world(resolved)
    check_parallelism(resolved, size, source)
    return resolved, size, source


def validate_config(config, world: tuple[int, str] | None = None) -> dict:
    """Raise `ConfigError` at the first problem; return the resolved config as plain data.

    `world`: (number of training ranks, where that number comes from); default: this launch's
    (`launch_world`). The dry run passes the world the config asks for (`planned_world`).
    """
    resolved, size, source = checked_common(config, world)
    check_batch_sizes(resolved, size // resolved["actor"]["tensor_parallel_size"], source)
    check_algorithm(resolved)
    check_lora(resolved)
    check_schedule(resolved)
    check_max_staleness(resolved)
    check_stream_groups(resolved)
    check_rollout_log_probs(resolved)
    check_placement(resolved)
    check_actor_memory(resolved)
    check_profile_steps(resolved)
    check_save_batch(resolved)
    check_multi_turn(resolved)
    check_reward_sources(resolved)
    return resolved


def resolved_config(config) -> dict:
    try:
        return OmegaConf.to_container(config, resolve=True)  # a broken ${...} fails here
    except OmegaConfBaseException as error:
        raise ConfigError(f"cannot resolve the config: {error}") from None


def launch_world(config) -> tuple[int, str]:
    """The training ranks this launch has: Ray's workers, torchrun's processes, or this one process."""
    trainer = config["trainer"]
    if trainer["controller"] == "ray":
        return planned_world(config)
    if "WORLD_SIZE" in os.environ:
        size = int(os.environ["WORLD_SIZE"])
        return size, f"torchrun's WORLD_SIZE={size}"
    return 1, "one process: not under torchrun"


def planned_world(config) -> tuple[int, str]:
    """The training ranks the config asks for (what the dry run plans and the Ray controller starts)."""
    nnodes, gpus = config["trainer"]["nnodes"], config["trainer"]["n_gpus_per_node"]
    return nnodes * gpus, f"trainer.nnodes={nnodes} × trainer.n_gpus_per_node={gpus}"


def check_types(resolved: dict) -> None:
    base = OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / "base.yaml"))
    for key, default in _leaves(base):
        kinds = KINDS_BEYOND_DEFAULT.get(key) or ((_kind_of(default),) if default is not None else None)
        value = lookup(resolved, key)
        if kinds is None or value is MISSING or any(KINDS[kind][1](value) for kind in kinds):
            continue
        expected = " or ".join(KINDS[kind][0] for kind in kinds)
        example = f", e.g. {key}={_yaml(default)} (base.yaml's default)" if default is not None else ""
        raise ConfigError(f"{key}={value!r} is {_kind_name(value)} — expected {expected}{example}")


def check_choices(resolved: dict) -> None:
    """Keys that take a name: an unknown one fails with the names that work."""
    choices = {
        "model.init": list(MODEL_INITS),
        "rollout.name": list(ROLLOUT_PACKAGES),
        "trainer.controller": list(CONTROLLER_PACKAGES),
        "trainer.schedule": list(SCHEDULES),
        "trainer.placement": list(PLACEMENTS),
        "algorithm.adv_estimator": ADV_ESTIMATORS.names(),
        "actor.policy_loss": POLICY_LOSSES.names(),
        "algorithm.rollout_correction.mode": [NO_CORRECTION, *ROLLOUT_CORRECTIONS.names()],
        "actor.loss_agg_mode": AGG_MODES.names(),
        "critic.loss_agg_mode": AGG_MODES.names(),
        "critic.value_head_init": list(VALUE_HEAD_INITS),
        "actor.kl_loss_type": KL_ESTIMATORS.names(),
        "algorithm.kl_penalty": KL_ESTIMATORS.names(),
        "data.truncation": list(TRUNCATION_MODES),
        "actor.mixed_precision": ["auto", "bf16", "fp32"],
        "actor.recompute_old_log_probs": ["auto", "always"],
        "actor.remove_padding": ["auto", True, False],
        "actor.compile_layers": ["auto", True, False],
        "actor.lora.sync": ["merged", "adapter"],
        "trainer.device": ["auto", "cpu", "cuda"],
        "reward.manager": list(MANAGERS),
        "reward.gsm8k_method": list(GSM8K_METHODS),
        "rollout.multi_turn.format": list(ACTION_FORMATS),
    }
    for key, valid in choices.items():
        value = lookup(resolved, key)
        if value not in valid:
            raise ConfigError(f"{key}={value!r} is not one of {valid} — set {key} to one of them")
    try:
        backend_names(resolved["tracking"])
    except ValueError as error:
        raise ConfigError(str(error)) from None


def check_ranges(resolved: dict) -> None:
    for key, valid in RANGES.items():
        value = lookup(resolved, key)
        if value is not None and value is not MISSING and not RANGE_TESTS[valid](value):
            raise ConfigError(f"{key}={value!r} is out of range — expected {valid}")


def check_parallelism(resolved: dict, world_size: int, source: str) -> None:
    """Tensor-parallel groups must tile the ranks (actor) and the GPUs (rollout engines)."""
    trainer, actor_tp = resolved["trainer"], resolved["actor"]["tensor_parallel_size"]
    rollout, rollout_tp = resolved["rollout"]["name"], resolved["rollout"]["tensor_model_parallel_size"]
    if actor_tp > 1 and trainer["controller"] == "ray":
        raise ConfigError(f"actor.tensor_parallel_size={actor_tp} with trainer.controller=ray — tensor parallel "
                          "training runs under trainer.controller=local (torchrun) only; set it to 1 under Ray")
    if world_size % actor_tp:
        raise ConfigError(f"actor.tensor_parallel_size={actor_tp} does not divide the {world_size} training "
                          f"rank(s) ({source}) — expected a divisor of {world_size}, or run on a multiple of "
                          f"{actor_tp} ranks")
    if rollout == "vllm" and world_size % rollout_tp:  # each engine spans that many ranks, one GPU each
        raise ConfigError(f"rollout.tensor_model_parallel_size={rollout_tp} does not divide the {world_size} "
                          f"rank(s) ({source}) — expected a divisor of {world_size}: each vLLM engine spans "
                          f"{rollout_tp} ranks")
    if rollout == "sglang" and trainer["n_gpus_per_node"] % rollout_tp:  # one engine process per node's GPUs
        raise ConfigError(f"rollout.tensor_model_parallel_size={rollout_tp} does not divide "
                          f"trainer.n_gpus_per_node={trainer['n_gpus_per_node']} — expected a divisor of it")


def check_batch_sizes(config, world_size: int, source: str = "") -> None:
    """Batch sizes must split over the data-parallel ranks and into whole mini-batches."""
    prompts, mini = config["data"]["train_batch_size"], config["actor"]["ppo_mini_batch_size"]
    sequences = mini * config["rollout"]["n"]
    where = f" ({source})" if source else ""
    if prompts % world_size:
        raise ConfigError(f"data.train_batch_size={prompts} must be divisible by the number of ranks "
                          f"({world_size}){where} — use a multiple of {world_size}")
    if prompts % mini:
        raise ConfigError(f"data.train_batch_size={prompts} must be a multiple of actor.ppo_mini_batch_size="
                          f"{mini} — set actor.ppo_mini_batch_size to a divisor of {prompts}")
    if sequences % world_size:
        raise ConfigError(f"actor.ppo_mini_batch_size × rollout.n = {sequences} sequences must split evenly over "
                          f"{world_size} ranks{where} — make that product a multiple of {world_size}")


def check_algorithm(resolved: dict) -> None:
    n, estimator = resolved["rollout"]["n"], resolved["algorithm"]["adv_estimator"]
    if estimator in GROUP_ESTIMATORS and n < 2:
        raise ConfigError(f"rollout.n={n} with algorithm.adv_estimator={estimator} — expected rollout.n ≥ 2: "
                          "its advantage compares the samples of one prompt, so it needs groups of two or more")
    loss, actor = resolved["actor"]["policy_loss"], resolved["actor"]
    if loss in SEQUENCE_LEVEL_LOSSES and estimator not in SEQUENCE_LEVEL_ESTIMATORS:
        raise ConfigError(f"actor.policy_loss={loss} with algorithm.adv_estimator={estimator} — expected an estimator "
                          f"with one advantage per response, one of {list(SEQUENCE_LEVEL_ESTIMATORS)}: {loss}'s "
                          f"ratio and clip are per sequence, and {estimator}'s advantages are per token")
    if actor["clip_cov_lb"] >= actor["clip_cov_ub"]:
        raise ConfigError(f"actor.clip_cov_lb={actor['clip_cov_lb']} with actor.clip_cov_ub={actor['clip_cov_ub']} — "
                          "expected clip_cov_lb < clip_cov_ub: Clip-Cov draws tokens with a covariance between them")
    buffer, max_response = resolved["reward"]["overlong_buffer"], resolved["data"]["max_response_length"]
    if buffer["enable"] and buffer["len"] >= max_response:
        raise ConfigError(f"reward.overlong_buffer.len={buffer['len']} with data.max_response_length="
                          f"{max_response} — expected a buffer shorter than the response length")
    correction = resolved["algorithm"]["rollout_correction"]
    if correction["mask_low"] >= correction["mask_high"]:
        raise ConfigError(f"algorithm.rollout_correction.mask_low={correction['mask_low']} ≥ mask_high="
                          f"{correction['mask_high']} — expected a band with mask_low < mask_high")
    if correction["bypass_mode"] and correction["mode"] != NO_CORRECTION:
        raise ConfigError(f"algorithm.rollout_correction.mode={correction['mode']} with bypass_mode=true — its weights "
                          "are π_old / π_rollout, and bypass mode makes π_old the rollout's: set one of them off")
    if correction["mode"] != NO_CORRECTION and loss not in CORRECTED_LOSSES:
        raise ConfigError(f"algorithm.rollout_correction.mode={correction['mode']} with actor.policy_loss={loss} — "
                          f"expected one of {list(CORRECTED_LOSSES)}: only they weigh tokens by the correction")


def check_trainer_class(trainer_cls, config) -> None:
    """Keys that only some trainers act on, refused with a trainer that would ignore them in silence."""
    if config.algorithm.filter_groups.enable and not getattr(trainer_cls, "samples_dynamically", False):
        raise ConfigError(f"algorithm.filter_groups.enable=true with trainer.cls={config.trainer.cls} — dynamic "
                          "sampling is DAPO's trainer's own step (recipes/dapo/trainer.py), which this trainer "
                          "does not run; use --recipe dapo, or a trainer.cls that subclasses DAPOTrainer")


def check_reward_sources(resolved: dict) -> None:
    """`reward.weights` against the sources that are on, the reward model's placement and the judge's template and
    parser (docs/rewards.md)."""
    reward, controller = resolved["reward"], resolved["trainer"]["controller"]
    source_weights(reward)
    for key, value, valid in (("reward.model.placement", reward["model"]["placement"], REWARD_MODEL_PLACEMENTS),
                              ("reward.model.mixed_precision", reward["model"]["mixed_precision"], ["auto", "bf16", "fp32"]),
                              ("reward.judge.rollout_name", reward["judge"]["rollout_name"], [None, *ROLLOUT_PACKAGES])):
        if value not in valid:
            raise ConfigError(f"{key}={value!r} is not one of {list(valid)}")
    if reward["model"]["path"] and reward["model"]["placement"] == "separate" and controller != "ray":
        raise ConfigError("reward.model.placement=separate puts the reward model on Ray actors of its own: set "
                          "trainer.controller=ray, or reward.model.placement=colocated")
    if reward["judge"]["enable"]:
        check_template(reward["judge"]["template"])
        check_parser(reward["judge"]["parser"], float(reward["judge"]["max_score"]))


def check_profile_steps(resolved: dict) -> None:
    steps = resolved["trainer"]["profile_steps"]
    bad = [step for step in steps if isinstance(step, bool) or not isinstance(step, int) or step < 1]
    if bad:
        raise ConfigError(f"trainer.profile_steps={steps!r} holds {bad[0]!r} — expected step numbers ≥ 1, "
                          "e.g. trainer.profile_steps=[2]")


def check_save_batch(resolved: dict) -> None:
    """A step the run reaches, and a directory it can make: found now, not after the steps before it.
    Nothing is created here (a refused config leaves no trace): the nearest existing parent must be a
    writable directory."""
    trainer = resolved["trainer"]
    step, directory = trainer["save_batch_step"], trainer["save_batch_dir"]
    if step is None:
        return
    if step > trainer["total_steps"]:
        raise ConfigError(f"trainer.save_batch_step={step} is after the last step (trainer.total_steps="
                          f"{trainer['total_steps']}) — expected a step from 1 to {trainer['total_steps']}")
    existing = Path(directory).expanduser().absolute()
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        what = "is not a directory" if not existing.is_dir() else "is not writable"
        raise ConfigError(f"trainer.save_batch_dir={directory!r} cannot be created: {existing} {what} — "
                          "set trainer.save_batch_dir to a directory this run can write")


def check_actor_memory(resolved: dict) -> None:
    """`actor.expandable_segments` beside the engine that shares the device (core/engine/allocator.py), and
    `actor.checkpoint_layers`, which only picks the layers gradient checkpointing recomputes."""
    actor = resolved["actor"]
    if actor["checkpoint_layers"] is not None and not actor["gradient_checkpointing"]:
        raise ConfigError(f"actor.checkpoint_layers={actor['checkpoint_layers']} with actor.gradient_checkpointing="
                          "false — it picks the layers checkpointing recomputes; set actor.gradient_checkpointing="
                          "true or actor.checkpoint_layers=null")
    if actor["expandable_segments"] and resolved["rollout"]["name"] == "sglang":
        raise ConfigError("actor.expandable_segments=True with rollout.name='sglang' — SGLang's memory saver turns "
                          "itself off under expandable segments; use rollout.name=vllm or hf, or set it to false")


def check_lora(resolved: dict) -> None:
    """`actor.lora.*` against the rest of the config and, when its config.json is at hand, the model."""
    lora, rank = resolved["actor"]["lora"], resolved["actor"]["lora"]["rank"]
    if rank is None:
        return
    if rank < 1:
        raise ConfigError(f"actor.lora.rank={rank} is out of range — expected ≥ 1 (e.g. 16), or null for full "
                          "fine-tuning")
    estimator, rollout = resolved["algorithm"]["adv_estimator"], resolved["rollout"]["name"]
    if estimator in CRITIC_ESTIMATORS:
        raise ConfigError(f"actor.lora.rank={rank} with algorithm.adv_estimator={estimator} — its critic (critic.*) "
                          "has no LoRA support and would train full weights; use a critic-free estimator "
                          f"({[e for e in ADV_ESTIMATORS.names() if e not in CRITIC_ESTIMATORS]}) or "
                          "actor.lora.rank=null")
    if resolved["actor"]["tensor_parallel_size"] > 1:
        raise ConfigError(f"actor.lora.rank={rank} with actor.tensor_parallel_size="
                          f"{resolved['actor']['tensor_parallel_size']} — LoRA trains under FSDP2 alone; set "
                          "actor.tensor_parallel_size=1 (a LoRA policy's state is small enough)")
    if importlib.util.find_spec("peft") is None:
        raise ConfigError(f"actor.lora.rank={rank} needs PEFT, which is not installed — pip install peft (on CPU: "
                          "pip install -c constraints-cpu.txt peft)")
    if lora["sync"] == "adapter" and rollout != "vllm":
        raise ConfigError(f"actor.lora.sync=adapter with rollout.name={rollout} — only vLLM serves an adapter; "
                          "use actor.lora.sync=merged or rollout.name=vllm")
    model = _architecture(resolved["model"])
    if model is not None:
        check_targets(LoraSpec.from_config(OmegaConf.create(lora)), model)


def _architecture(model: dict):
    """The policy's modules on the meta device (no memory, no weights read), when its config is local:
    the embedded model's, or a dir's config.json. None otherwise (a hub id, a GGUF file): the engine
    checks the same when it loads the model."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from core.models.loading import EMBEDDED_PREFIX

    path = model["path"]
    if path.startswith(EMBEDDED_PREFIX):
        from core.models.tiny import build_tiny_tokenizer, tiny_qwen3_config

        config = tiny_qwen3_config(build_tiny_tokenizer())
    elif (Path(path).expanduser() / "config.json").is_file() and not model["gguf_file"]:
        config = AutoConfig.from_pretrained(path, trust_remote_code=model["trust_remote_code"])
    else:
        return None
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config, trust_remote_code=model["trust_remote_code"])


def _leaves(tree: dict, prefix: str = ""):
    """(dotted key, default) of every value in base.yaml; an empty mapping (tags) is a leaf."""
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def _kind_of(default) -> str:
    if isinstance(default, bool):
        return "bool"
    if isinstance(default, int):
        return "int"
    return {float: "number", str: "str", list: "list", dict: "dict"}[type(default)]


def _kind_name(value) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a float", str: "a string", list: "a list",
             dict: "a mapping", type(None): "null"}
    return names.get(type(value), f"a {type(value).__name__}")


def _yaml(value) -> str:
    """A default as it is written in an override."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return "[" + ",".join(map(str, value)) + "]"
    return str(value)
