#!/usr/bin/env bash
# SFT of Qwen/Qwen3-8B on GSM8K's worked solutions (the stage before RL), in the spirit of verl's GSM8K SFT example
# (prompt + extra_info.answer, lr 1e-5), on one node.
# Launch: bash recipes/sft/run_qwen3_8b.sh
# Hardware: 1 node × 8 GPUs with 80 GB each (A100/H100 80GB); another GPU count: NGPUS=2 bash <this script>.
# Data: prepare GSM8K in verl's schema first:  recipezoo data gsm8k --out $HOME/data/gsm8k
#       (or set DATA=/path/to/dir holding train.parquet and test.parquet); each row's extra_info.answer is the reply.
# Check before you launch (offline, no GPU, nothing downloaded):  bash recipes/sft/run_qwen3_8b.sh --dry-run
# Then RL from the SFT weights: bash recipes/grpo/run_qwen3_8b.sh model.path=outputs/sft-qwen3-8b/checkpoints
# The shared 8B keys (model, lengths, gradient checkpointing) are core/config/presets/qwen3_8b.yaml's; its vLLM keys
# do not apply to SFT, which generates nothing. The keys below are SFT's 8B deltas.
# total_steps: 3 epochs of GSM8K's 7473 train examples at 256 per step (29 full batches) = 87; a checkpoint and a
# held-out loss each epoch. micro_batch_tokens 16384: packed micro-batches of about 16k real tokens per GPU.
exec bash "$(dirname "$0")/../launch_qwen3_8b.sh" "${RECIPE:-sft}" \
    data.train_batch_size=256 \
    actor.lr=1.0e-5 \
    actor.warmup_steps=5 \
    actor.weight_decay=0.01 \
    actor.micro_batch_tokens=16384 \
    trainer.total_steps=87 \
    trainer.save_freq=29 \
    trainer.test_freq=29 \
    tracking.run_name="${RUN_NAME:-sft-qwen3-8b}" \
    "$@"
