#!/usr/bin/env bash
# PPO on GSM8K with Qwen/Qwen3-8B: the real run, in the spirit of verl's GSM8K PPO example
# (GAE γ = λ = 1, n=1, 1024 prompts per step, actor lr 1e-6, critic lr 1e-5, no KL).
# Hardware: 1 node × 8 GPUs with 80 GB each (A100/H100 80GB); actor, rollout and critic share them.
#   Another GPU count: NGPUS=2 bash <this script> data.train_batch_size=... (bench/scale_suite.sh shows the 2-GPU settings).
# Data: prepare GSM8K in verl's schema first:  recipezoo data gsm8k --out $HOME/data/gsm8k
#       (or set DATA=/path/to/dir holding train.parquet and test.parquet).
# Check before you launch (offline, no GPU, nothing downloaded):  bash recipes/ppo/run_qwen3_8b.sh --dry-run
# Extra arguments are config overrides, e.g.: bash recipes/ppo/run_qwen3_8b.sh trainer.total_steps=20
set -euo pipefail
NGPUS="${NGPUS:-8}"  # GPUs of this node (one torchrun rank or Ray worker each)
DATA="${DATA:-$HOME/data/gsm8k}"
case "$DATA" in /*) ;; *) DATA="$PWD/$DATA" ;; esac  # absolute before the cd below
cd "$(dirname "$0")/../.."
# total_steps: 15 epochs of GSM8K's 7473 train prompts at 1024 per step (7 full batches) = 105.
# micro_batch_size 16: a mini-batch is 256 × 1 = 256 sequences, 32 per GPU, so 2 accumulation steps
# for the actor and for the critic (a second 8B model with its own optimizer on the same GPUs).
# One process per GPU (the local controller's SPMD mode); a dry run needs only one.
case " $* " in
    *" --dry-run "*|*" trainer.dry_run=true "*) launcher=(python) ;;
    *" trainer.controller=ray "*) launcher=(python) ;;  # one driver; Ray places the workers (RAY_ADDRESS)
    *) launcher=(torchrun --nnodes=1 --nproc_per_node="$NGPUS") ;;
esac
exec "${launcher[@]}" -m core.cli train --recipe ppo \
    model.path=Qwen/Qwen3-8B \
    data.train_files="$DATA/train.parquet" \
    data.val_files="$DATA/test.parquet" \
    data.train_batch_size=1024 \
    data.val_max_samples=null \
    data.max_prompt_length=512 \
    data.max_response_length=1024 \
    rollout.name=vllm \
    rollout.enforce_eager=false \
    rollout.n=1 \
    actor.lr=1e-6 \
    actor.ppo_mini_batch_size=256 \
    actor.micro_batch_size=16 \
    actor.use_kl_loss=false \
    actor.entropy_coeff=0 \
    actor.gradient_checkpointing=true \
    critic.lr=1e-5 \
    critic.micro_batch_size=16 \
    algorithm.adv_estimator=gae \
    algorithm.use_kl_in_reward=false \
    trainer.critic_warmup=0 \
    trainer.nnodes=1 \
    trainer.n_gpus_per_node="$NGPUS" \
    trainer.total_steps=105 \
    trainer.test_freq=5 \
    tracking.run_name=ppo-qwen3-8b \
    "$@"
