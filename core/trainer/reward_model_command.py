"""`recipezoo rm` argument parsing: train a reward model on preference pairs (core/trainer/reward_model_training.py)."""

from __future__ import annotations

import argparse
import sys


def add_parser(commands) -> None:
    rm = commands.add_parser("rm", help="train a reward model on preference pairs (Bradley-Terry loss)")
    rm.add_argument("--model", required=True, help="the model to start from: a causal LM (a fresh scalar head) or "
                                                   "a reward model; HF id, local dir or embedded://tiny-arith")
    rm.add_argument("--train-files", nargs="+", required=True, help="preference .parquet/.jsonl files: prompt, "
                                                                    "chosen, rejected (strings or chat messages)")
    rm.add_argument("--val-files", nargs="+", default=(), help="held-out pairs (default: --val-fraction of the prompts)")
    rm.add_argument("--val-fraction", type=float, default=0.1, help="share of the prompts held out without --val-files")
    rm.add_argument("--out", required=True, help="output dir: <out>/checkpoints and the HF model in <out>/model")
    rm.add_argument("--epochs", type=int, default=1)
    rm.add_argument("--batch-size", type=int, default=32, help="pairs per optimizer step, over all ranks")
    rm.add_argument("--lr", type=float, default=1e-5)
    rm.add_argument("--weight-decay", type=float, default=0.0)
    rm.add_argument("--warmup-steps", type=int, default=0)
    rm.add_argument("--grad-clip", type=float, default=1.0)
    rm.add_argument("--micro-batch-size", type=int, default=16, help="rows (two per pair) per forward")
    rm.add_argument("--micro-batch-tokens", type=int, default=None, help="real tokens per forward instead")
    rm.add_argument("--max-length", type=int, default=1024, help="tokens of prompt + answer; longer pairs are left out")
    rm.add_argument("--mixed-precision", default="auto", choices=["auto", "bf16", "fp32"])
    rm.add_argument("--seed", type=int, default=0)
    rm.add_argument("--resume", default="disable", help="auto: continue from the newest valid checkpoint under "
                                                        "<out>/checkpoints, bit for bit; disable; or a checkpoint dir")
    rm.add_argument("--save-freq", type=int, default=0, help="a checkpoint every N steps (default: the last only)")
    rm.add_argument("--keep-checkpoints", type=int, default=0, help="keep the newest N checkpoints (default: all)")
    rm.add_argument("--device", default="auto", help="auto | cpu | cuda")
    rm.add_argument("--mlflow-uri", default=None, help="tracking URI (default: sqlite:///<cwd>/mlflow.db)")
    rm.add_argument("--experiment", default="recipezoo-rm")
    rm.add_argument("--run-name", default=None)
    rm.add_argument("--no-mlflow", action="store_true", help="log to the console only")
    rm.set_defaults(handler=_command)


def _command(args: argparse.Namespace) -> int:
    from core.trainer.reward_model_training import RewardModelSpec, train_reward_model

    spec = RewardModelSpec(
        model=args.model, train_files=tuple(args.train_files), val_files=tuple(args.val_files),
        val_fraction=args.val_fraction, out=args.out, epochs=args.epochs, batch_size=args.batch_size, lr=args.lr,
        weight_decay=args.weight_decay, warmup_steps=args.warmup_steps, grad_clip=args.grad_clip,
        micro_batch_size=args.micro_batch_size, micro_batch_tokens=args.micro_batch_tokens,
        max_length=args.max_length, mixed_precision=args.mixed_precision, seed=args.seed, device=args.device,
        mlflow_uri=args.mlflow_uri, experiment=args.experiment, run_name=args.run_name, tracking=not args.no_mlflow,
        resume=args.resume, save_freq=args.save_freq, keep_checkpoints=args.keep_checkpoints)
    try:
        train_reward_model(spec)
    except ValueError as error:
        print(f"recipezoo rm: {error}", file=sys.stderr)
        return 2
    return 0
