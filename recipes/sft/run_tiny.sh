#!/usr/bin/env bash
# SFT, then RL from its checkpoint, on the embedded tiny Qwen3 + arithmetic task: the pipeline of a real
# post-training run, on 2 CPU cores, no GPU, no download (a few minutes, then GRPO's ~10).
#   1. recipezoo sft: the untrained tiny model (embedded://tiny-base) learns the answer format from the task's
#      worked answers (recipes/sft/config.yaml); its checkpoints land in $SFT_DIR/checkpoints.
#   2. recipezoo train --recipe grpo with model.path=$SFT_DIR/checkpoints: RL starts from the SFT weights.
# Extra arguments are SFT overrides, e.g.: bash recipes/sft/run_tiny.sh trainer.total_steps=100 (--dry-run: SFT's plan only)
# SFT_DIR (default outputs/sft) is the SFT run's dir; RL_STEPS (default 20) GRPO's steps, 0 to stop after SFT.
set -euo pipefail
cd "$(dirname "$0")/../.."
SFT_DIR="${SFT_DIR:-outputs/sft}"
RL_STEPS="${RL_STEPS:-20}"
python -m core.cli sft --recipe sft trainer.output_dir="$SFT_DIR" "$@"
case " $* " in *" --dry-run "*|*" trainer.dry_run=true "*) exit 0 ;; esac  # a dry run trains nothing to start RL from
if [ "$RL_STEPS" -gt 0 ]; then
    exec python -m core.cli train --recipe grpo model.path="$SFT_DIR/checkpoints" trainer.total_steps="$RL_STEPS" \
        trainer.test_freq=10 tracking.run_name=grpo-after-sft
fi
