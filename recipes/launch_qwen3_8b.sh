#!/usr/bin/env bash
# What every recipes/<recipe>/run_qwen3_8b.sh execs: the real Qwen3-8B run of RECIPE on GSM8K, one node.
#   bash recipes/launch_qwen3_8b.sh RECIPE [overrides...]   (RECIPE: a recipe name or a config .yaml)
# It lays the shared 8B keys (core/config/presets/qwen3_8b.yaml) over RECIPE's config, points the run at the
# GSM8K files in DATA and at this node's NGPUS GPUs, and starts one process per GPU; the overrides (the
# recipe's own 8B keys, then the user's) come last and win.
set -euo pipefail
RECIPE="${1:?usage: bash recipes/launch_qwen3_8b.sh RECIPE [overrides...] (RECIPE: a recipe name or a config .yaml)}"
shift
NGPUS="${NGPUS:-8}"  # GPUs of this node (one torchrun rank or Ray worker each)
DATA="${DATA:-$HOME/data/gsm8k}"
case "$DATA" in /*) ;; *) DATA="$PWD/$DATA" ;; esac  # absolute before the cd below
cd "$(dirname "$0")/.."
# One process per GPU (the local controller's SPMD mode); a dry run needs only one.
case " $* " in
    *" --dry-run "*|*" trainer.dry_run=true "*) launcher=(python) ;;
    *" trainer.controller=ray "*) launcher=(python) ;;  # one driver; Ray places the workers (RAY_ADDRESS)
    *) launcher=(torchrun --nnodes=1 --nproc_per_node="$NGPUS") ;;
esac
exec "${launcher[@]}" -m core.cli train --recipe "$RECIPE" +presets=qwen3_8b \
    data.train_files="$DATA/train.parquet" \
    data.val_files="$DATA/test.parquet" \
    trainer.nnodes=1 \
    trainer.n_gpus_per_node="$NGPUS" \
    "$@"
