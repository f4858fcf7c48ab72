#!/usr/bin/env bash
# DAPO on GSM8K with Qwen/Qwen3-8B: the real run with the DAPO paper's algorithm settings
# (512 prompt groups × n=16 samples per step, mini-batch 32 prompts, lr 1e-6, clip 0.2/0.28,
# dual-clip c=10, token-mean loss, no KL, dynamic sampling, overlong buffer with factor 1.0).
# Lengths are scaled to GSM8K: responses up to 2048 tokens, the last 512 of them the overlong buffer
# (the paper: 20480 and 4096 on DAPO-Math-17k).
# Hardware: 1 node × 8 GPUs with 80 GB each (A100/H100 80GB).
#   Another GPU count: NGPUS=2 bash <this script> data.train_batch_size=... (bench/scale_suite.sh shows the 2-GPU settings).
# Data: prepare GSM8K in verl's schema first:  recipezoo data gsm8k --out $HOME/data/gsm8k
#       (or set DATA=/path/to/dir holding train.parquet and test.parquet).
# Check before you launch (offline, no GPU, nothing downloaded):  bash recipes/dapo/run_qwen3_8b.sh --dry-run
# Extra arguments are config overrides, e.g.: bash recipes/dapo/run_qwen3_8b.sh trainer.total_steps=20
set -euo pipefail
NGPUS="${NGPUS:-8}"  # GPUs of this node (one torchrun rank or Ray worker each)
DATA="${DATA:-$HOME/data/gsm8k}"
case "$DATA" in /*) ;; *) DATA="$PWD/$DATA" ;; esac  # absolute before the cd below
cd "$(dirname "$0")/../.."
# total_steps: 100 steps of 512 kept groups; dynamic sampling draws more prompts than that per step.
# micro_batch_size 16: a mini-batch is 32 × 16 = 512 sequences, 64 per GPU, so 4 accumulation steps.
# One process per GPU (the local controller's SPMD mode); a dry run needs only one.
case " $* " in
    *" --dry-run "*|*" trainer.dry_run=true "*) launcher=(python) ;;
    *" trainer.controller=ray "*) launcher=(python) ;;  # one driver; Ray places the workers (RAY_ADDRESS)
    *) launcher=(torchrun --nnodes=1 --nproc_per_node="$NGPUS") ;;
esac
exec "${launcher[@]}" -m core.cli train --recipe dapo \
    model.path=Qwen/Qwen3-8B \
    data.train_files="$DATA/train.parquet" \
    data.val_files="$DATA/test.parquet" \
    data.train_batch_size=512 \
    data.val_max_samples=null \
    data.max_prompt_length=512 \
    data.max_response_length=2048 \
    rollout.name=vllm \
    rollout.enforce_eager=false \
    rollout.n=16 \
    actor.lr=1e-6 \
    actor.ppo_mini_batch_size=32 \
    actor.micro_batch_size=16 \
    actor.clip_ratio_low=0.2 \
    actor.clip_ratio_high=0.28 \
    actor.clip_ratio_c=10.0 \
    actor.loss_agg_mode=token-mean \
    actor.use_kl_loss=false \
    algorithm.use_kl_in_reward=false \
    algorithm.filter_groups.enable=true \
    algorithm.filter_groups.max_num_gen_batches=10 \
    reward.overlong_buffer.enable=true \
    reward.overlong_buffer.len=512 \
    reward.overlong_buffer.penalty_factor=1.0 \
    actor.entropy_coeff=0 \
    actor.gradient_checkpointing=true \
    trainer.nnodes=1 \
    trainer.n_gpus_per_node="$NGPUS" \
    trainer.total_steps=100 \
    trainer.test_freq=5 \
    tracking.run_name=dapo-qwen3-8b \
    "$@"
