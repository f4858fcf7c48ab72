#!/usr/bin/env bash
# DAPO on GSM8K with Qwen/Qwen3-8B: the real run with the DAPO paper's algorithm settings
# (512 prompt groups × n=16 samples per step, mini-batch 32 prompts, lr 1e-6, clip 0.2/0.28,
# dual-clip c=10, token-mean loss, no KL, dynamic sampling, overlong buffer with factor 1.0).
# Lengths are scaled to GSM8K: responses up to 2048 tokens, the last 512 of them the overlong buffer
# (the paper: 20480 and 4096 on DAPO-Math-17k).
# Launch: bash recipes/dapo/run_qwen3_8b.sh
# Hardware: 1 node × 8 GPUs with 80 GB each (A100/H100 80GB).
#   Another GPU count: NGPUS=2 bash <this script> data.train_batch_size=... (bench/scale/suite.sh shows the 2-GPU settings).
# At 0.5B here: the GSM8K block of recipes/dapo/README.md (Qwen2.5-Coder-0.5B-Instruct on one H200,
#   generated from results/leaderboard/gsm8k_coder).
# verl's table (docs/algo/baseline.md) has no GSM8K row of DAPO; its Qwen2.5-0.5B-Instruct rows: 36.4 ->
#   56.7 with PPO, 54.3 with GRPO-LoRA.
# Data: prepare GSM8K in verl's schema first:  recipezoo data gsm8k --out $HOME/data/gsm8k
#       (or set DATA=/path/to/dir holding train.parquet and test.parquet).
# Check before you launch (offline, no GPU, nothing downloaded):  bash recipes/dapo/run_qwen3_8b.sh --dry-run
# Extra arguments are config overrides, e.g.: bash recipes/dapo/run_qwen3_8b.sh trainer.total_steps=20
# The keys below are DAPO's 8B deltas: the algorithm is recipes/dapo/config.yaml's, the shared 8B keys
# (model, lengths, vLLM, lr) core/config/presets/qwen3_8b.yaml's.
# total_steps: 100 steps of 512 kept groups; dynamic sampling draws more prompts than that per step.
# micro_batch_size 16: a mini-batch is 32 × 16 = 512 sequences, 64 per GPU, so 4 accumulation steps.
exec bash "$(dirname "$0")/../launch_qwen3_8b.sh" dapo \
    data.train_batch_size=512 \
    data.max_response_length=2048 \
    rollout.n=16 \
    actor.ppo_mini_batch_size=32 \
    actor.micro_batch_size=16 \
    reward.overlong_buffer.len=512 \
    trainer.total_steps=100 \
    tracking.run_name=dapo-qwen3-8b \
    "$@"
