"""`recipezoo merge` argument parsing: a checkpoint exported to a HF model dir (core/trainer/checkpoint_export.py,
imported when the command runs, so that building the CLI's parser loads neither torch nor transformers)."""

from __future__ import annotations

import argparse
import sys


def add_parser(commands) -> None:
    merge = commands.add_parser("merge", help="export a checkpoint to a HF model dir (safetensors)")
    merge.add_argument("--checkpoint", required=True,
                       help="a global_step_N dir, or a checkpoint dir (its latest checkpoint)")
    merge.add_argument("--out", required=True, help="output dir for the HF model")
    merge.add_argument("--role", default="actor", help="the checkpoint's role to export; an unknown one is refused, "
                       "naming the roles an export knows")
    merge.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default=None,
                       help="cast the weights (default: as trained, fp32)")
    merge.add_argument("--adapter", action="store_true",
                       help="LoRA checkpoints: write the PEFT adapter dir (adapter_config.json + "
                            "adapter_model.safetensors) instead of the merged model")
    merge.add_argument("--base", default=None,
                       help="LoRA checkpoints: the base model's dir or hub id, when it is no longer where training "
                            "read it (the checkpoint's actor/lora.pt names that place)")
    merge.set_defaults(handler=_merge_command)


def _merge_command(args: argparse.Namespace) -> int:
    import torch

    from core.trainer.checkpoint import CheckpointError
    from core.trainer.checkpoint_export import merge_checkpoint

    try:
        out = merge_checkpoint(args.checkpoint, args.out, args.role, getattr(torch, args.dtype) if args.dtype else None,
                               adapter=args.adapter, base=args.base)
    except CheckpointError as error:
        print(f"recipezoo merge: {error}", file=sys.stderr)
        return 1
    loader = "PeftModel.from_pretrained(base_model, {!r})" if args.adapter else "AutoModelForCausalLM.from_pretrained({!r})"
    print(f"wrote {out} (load with {loader.format(str(out))})", flush=True)
    return 0
