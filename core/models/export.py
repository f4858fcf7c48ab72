"""From a training checkpoint to a plain HF model dir (`recipezoo merge`).

A checkpoint keeps each role's unsharded weights (`<role>/model.pt`) next to the files that describe
the model (`<role>/hf/`: config, generation config, tokenizer), so exporting needs no distributed
code and no access to the original model path.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForTokenClassification

from core.trainer.checkpoint import CheckpointError, find_checkpoint

# The architecture each role's weights belong to: the actor is a causal LM, the critic a value head.
ROLE_CLASSES = {"actor": AutoModelForCausalLM, "critic": AutoModelForTokenClassification}


def write_hf_files(model: torch.nn.Module, tokenizer, out_dir: Path) -> None:
    """Config, generation config and tokenizer of `model`: everything but the weights."""
    out_dir.mkdir(parents=True, exist_ok=True)
    model.config.save_pretrained(out_dir)
    generation_config = getattr(model, "generation_config", None)
    if generation_config is not None:
        generation_config.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)


def merge_checkpoint(checkpoint: str | Path, out_dir: str | Path, role: str = "actor",
                     dtype: torch.dtype | None = None) -> Path:
    """Write `<checkpoint>/<role>` as a HF dir (safetensors) that `from_pretrained` loads."""
    path = find_checkpoint(Path(checkpoint), "--checkpoint")
    role_dir = path / role
    if role not in ROLE_CLASSES:
        raise CheckpointError(f"--role {role!r}: expected one of {sorted(ROLE_CLASSES)}")
    for needed in (role_dir / "model.pt", role_dir / "hf" / "config.json"):
        if not needed.is_file():
            raise CheckpointError(f"{path} has no {needed.relative_to(path)}; is it a recipezoo checkpoint "
                                  f"with a {role!r} role?")
    config = AutoConfig.from_pretrained(role_dir / "hf")
    with torch.device("meta"):
        model = ROLE_CLASSES[role].from_config(config)
    state = torch.load(role_dir / "model.pt", weights_only=True, mmap=True)
    model.load_state_dict(state, strict=True, assign=True)
    model.tie_weights()
    if dtype is not None:
        model.to(dtype)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    for item in (role_dir / "hf").iterdir():
        if item.name != "config.json" and item.is_file():  # save_pretrained wrote the config
            shutil.copy2(item, out / item.name)
    return out


def add_parser(commands) -> None:
    merge = commands.add_parser("merge", help="export a checkpoint to a HF model dir (safetensors)")
    merge.add_argument("--checkpoint", required=True,
                       help="a global_step_N dir, or a checkpoint dir (its latest checkpoint)")
    merge.add_argument("--out", required=True, help="output dir for the HF model")
    merge.add_argument("--role", default="actor", choices=sorted(ROLE_CLASSES))
    merge.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default=None,
                       help="cast the weights (default: as trained, fp32)")
    merge.set_defaults(handler=_merge_command)


def _merge_command(args: argparse.Namespace) -> int:
    try:
        out = merge_checkpoint(args.checkpoint, args.out, args.role,
                               getattr(torch, args.dtype) if args.dtype else None)
    except CheckpointError as error:
        print(f"recipezoo merge: {error}", file=sys.stderr)
        return 1
    print(f"wrote {out} (load with AutoModelForCausalLM.from_pretrained({str(out)!r}))", flush=True)
    return 0
