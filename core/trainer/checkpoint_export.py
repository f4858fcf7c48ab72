"""From a training checkpoint to a plain HF model dir, or a PEFT adapter dir (`recipezoo merge`).

A checkpoint keeps each role's unsharded weights (`<role>/model.pt`) next to the files that describe
the model (`<role>/hf/`: config, generation config, tokenizer), so exporting needs no distributed
code. A LoRA policy's checkpoint holds the adapters alone (`actor/lora.pt` names the base model):
merging reads the base weights from there (or `--base`), `--adapter` writes the adapter as PEFT does.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path
from types import SimpleNamespace

import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
)

from core.file_lock import exclusive_file_lock
from core.models.loading import HUB_ID, resolve_model_path
from core.models.lora import LoraSpec, merge_adapter_into, write_adapter_dir
from core.models.random_init import build_causal_lm
from core.models.warmstart import default_cache_dir
from core.trainer.checkpoint import LATEST_FILE, TRAINER_STATE, CheckpointError, find_checkpoint, verify_checkpoint
from core.trainer.checksums import CHECKSUM_FILE

# The architecture each role's weights belong to: the actor is a causal LM, the critic a value head per token, a
# reward model (`recipezoo rm`) one scalar head read at the last token.
ROLE_CLASSES = {"actor": AutoModelForCausalLM, "critic": AutoModelForTokenClassification,
                "reward_model": AutoModelForSequenceClassification}


def write_hf_files(model: torch.nn.Module, tokenizer, out_dir: Path) -> None:
    """Config, generation config and tokenizer of `model`: everything but the weights."""
    out_dir.mkdir(parents=True, exist_ok=True)
    model.config.save_pretrained(out_dir)
    generation_config = getattr(model, "generation_config", None)
    if generation_config is not None:
        generation_config.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)


def merge_checkpoint(checkpoint: str | Path, out_dir: str | Path, role: str = "actor",
                     dtype: torch.dtype | None = None, *, adapter: bool = False, base: str | None = None) -> Path:
    """Write `<checkpoint>/<role>` as a HF dir (safetensors) that `from_pretrained` loads; a LoRA
    checkpoint merged into its base (`base`: where the base model is now, if it moved), or with
    `adapter` as a PEFT adapter dir."""
    path = find_checkpoint(Path(checkpoint), "--checkpoint")
    role_dir = path / role
    if role not in ROLE_CLASSES:
        raise CheckpointError(f"--role {role!r}: expected one of {sorted(ROLE_CLASSES)}")
    for needed in (role_dir / "model.pt", role_dir / "hf" / "config.json"):
        if not needed.is_file():
            raise CheckpointError(f"{path} has no {needed.relative_to(path)}; is it a recipezoo checkpoint "
                                  f"with a {role!r} role?")
    lora_file = role_dir / "lora.pt"
    if adapter and not lora_file.is_file():
        raise CheckpointError(f"--adapter: {role_dir} holds full weights, not a LoRA adapter (trained without "
                              "actor.lora.rank); drop --adapter to export the model")
    state = torch.load(role_dir / "model.pt", weights_only=True, mmap=True)
    out = Path(out_dir)
    if lora_file.is_file():
        spec = LoraSpec.from_dict(torch.load(lora_file, weights_only=True))
        if base is not None:
            spec.base["path"] = base
        if adapter:
            write_adapter_dir(state, spec, out, dtype)
            _copy_hf_files(role_dir / "hf", out, skip=("config.json", "generation_config.json"))
            return out
        model = _merged_lora_model(spec, state)
    else:
        config = AutoConfig.from_pretrained(role_dir / "hf")
        with torch.device("meta"):
            model = ROLE_CLASSES[role].from_config(config)
        model.load_state_dict(state, strict=True, assign=True)
        model.tie_weights()
    if dtype is not None:
        model.to(dtype)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    _copy_hf_files(role_dir / "hf", out, skip=("config.json",))  # save_pretrained wrote the config
    return out


def is_checkpoint(path: str | Path) -> bool:
    """A recipezoo checkpoint: a `global_step_N` dir, or a checkpoint dir holding them (its latest is meant)."""
    path = Path(path).expanduser()
    return (path / TRAINER_STATE).is_file() or (path / LATEST_FILE).is_file()


def policy_model_path(path: str, cache_dir: Path | None = None) -> str:
    """`model.path` as a run loads it: a checkpoint of an earlier run (SFT's or RL's) is its actor exported once
    to a HF dir in the cache, which every role then loads as any model dir; anything else as `resolve_model_path`
    gives it. The export is keyed by the checkpoint's place and checksums, so a new save exports anew."""
    if not is_checkpoint(path):
        return resolve_model_path(path)
    checkpoint = find_checkpoint(Path(path).expanduser(), "model.path")
    verify_checkpoint(checkpoint)
    sums = checkpoint / CHECKSUM_FILE
    identity = str(checkpoint.resolve()) + (sums.read_text() if sums.is_file() else "")
    out = Path(cache_dir or default_cache_dir()) / "checkpoints" / (
        f"{checkpoint.parent.name}-{checkpoint.name}-{hashlib.sha256(identity.encode()).hexdigest()[:12]}")
    if (out / "config.json").exists():
        return str(out)
    with exclusive_file_lock(out.with_name(out.name + ".lock")):
        if not (out / "config.json").exists():
            tmp = out.with_name(f"{out.name}.tmp{os.getpid()}")
            merge_checkpoint(checkpoint, tmp)
            os.replace(tmp, out)  # atomic: an interrupted export never leaves half a model at `out`
            print(f"model.path: exported the actor of {checkpoint} to {out}", flush=True)
    return str(out)


def _merged_lora_model(spec: LoraSpec, adapter_state: dict) -> torch.nn.Module:
    """The base model (its weights, or the same seeded random ones) with W + (alpha/r)·B·A in each layer."""
    info = spec.base
    if info["init"] == "pretrained" and not Path(info["path"]).expanduser().exists() and not HUB_ID.fullmatch(info["path"]):
        raise CheckpointError(f"the LoRA base model {info['path']} does not exist any more; pass --base with "
                              "its current dir or hub id")
    model = build_causal_lm(SimpleNamespace(**{k: info[k] for k in ("init", "gguf_file", "trust_remote_code")}),
                            info["path"], seed=info["seed"])
    model.load_state_dict(merge_adapter_into(model.state_dict(), adapter_state, spec.scaling), strict=True)
    return model


def _copy_hf_files(source: Path, out: Path, skip: tuple[str, ...]) -> None:
    for item in source.iterdir():
        if item.name not in skip and item.is_file():
            shutil.copy2(item, out / item.name)
