#!/usr/bin/env bash
# RLOO on GSM8K with Qwen/Qwen3-8B: the real run, in the spirit of verl's published GSM8K RLOO
# example (1024 prompts × n=5 samples per step, KL in the reward k1 0.001, no KL loss, lr 1e-6).
# The tiny recipe (config.yaml) uses n=8 to keep its 256-sequence budget; here n is the published 5.
# Hardware: 1 node × 8 GPUs with 80 GB each (A100/H100 80GB).
#   Another GPU count: NGPUS=2 bash <this script> data.train_batch_size=... (bench/scale_suite.sh shows the 2-GPU settings).
# Data: prepare GSM8K in verl's schema first:  recipezoo data gsm8k --out $HOME/data/gsm8k
#       (or set DATA=/path/to/dir holding train.parquet and test.parquet).
# Check before you launch (offline, no GPU, nothing downloaded):  bash recipes/rloo/run_qwen3_8b.sh --dry-run
# Extra arguments are config overrides, e.g.: bash recipes/rloo/run_qwen3_8b.sh trainer.total_steps=20
set -euo pipefail
NGPUS="${NGPUS:-8}"  # GPUs of this node (one torchrun rank or Ray worker each)
DATA="${DATA:-$HOME/data/gsm8k}"
case "$DATA" in /*) ;; *) DATA="$PWD/$DATA" ;; esac  # absolute before the cd below
cd "$(dirname "$0")/../.."
# total_steps: 15 epochs of GSM8K's 7473 train prompts at 1024 per step (7 full batches) = 105.
# micro_batch_size 32: a mini-batch is 256 × 5 = 1280 sequences, 160 per GPU, so 5 accumulation steps.
# One process per GPU (the local controller's SPMD mode); a dry run needs only one.
case " $* " in
    *" --dry-run "*|*" trainer.dry_run=true "*) launcher=(python) ;;
    *" trainer.controller=ray "*) launcher=(python) ;;  # one driver; Ray places the workers (RAY_ADDRESS)
    *) launcher=(torchrun --nnodes=1 --nproc_per_node="$NGPUS") ;;
esac
exec "${launcher[@]}" -m core.cli train --recipe rloo \
    model.path=Qwen/Qwen3-8B \
    data.train_files="$DATA/train.parquet" \
    data.val_files="$DATA/test.parquet" \
    data.train_batch_size=1024 \
    data.val_max_samples=null \
    data.max_prompt_length=512 \
    data.max_response_length=1024 \
    rollout.name=vllm \
    rollout.enforce_eager=false \
    rollout.n=5 \
    actor.lr=1e-6 \
    actor.ppo_mini_batch_size=256 \
    actor.micro_batch_size=32 \
    actor.use_kl_loss=false \
    algorithm.use_kl_in_reward=true \
    algorithm.kl_penalty=k1 \
    algorithm.kl_coef=0.001 \
    actor.entropy_coeff=0 \
    actor.gradient_checkpointing=true \
    trainer.nnodes=1 \
    trainer.n_gpus_per_node="$NGPUS" \
    trainer.total_steps=105 \
    trainer.test_freq=5 \
    tracking.run_name=rloo-qwen3-8b \
    "$@"
