#!/usr/bin/env bash
# RLOO on GSM8K with Qwen/Qwen3-8B: the real run, in the spirit of verl's published GSM8K RLOO
# example (1024 prompts × n=5 samples per step, KL in the reward k1 0.001, no KL loss, lr 1e-6).
# The tiny recipe (config.yaml) uses n=8 to keep its 256-sequence budget; here n is the published 5.
# Launch: bash recipes/rloo/run_qwen3_8b.sh
# Hardware: 1 node × 8 GPUs with 80 GB each (A100/H100 80GB).
#   Another GPU count: NGPUS=2 bash <this script> data.train_batch_size=... (bench/scale/suite.sh shows the 2-GPU settings).
# At 0.5B here: the GSM8K block of recipes/rloo/README.md (Qwen2.5-Coder-0.5B-Instruct on one H200,
#   generated from results/leaderboard/gsm8k_coder).
# verl's table (docs/algo/baseline.md) has no GSM8K row of RLOO; its Qwen2.5-0.5B-Instruct rows: 36.4 ->
#   56.7 with PPO, 54.3 with GRPO-LoRA.
# Data: prepare GSM8K in verl's schema first:  recipezoo data gsm8k --out $HOME/data/gsm8k
#       (or set DATA=/path/to/dir holding train.parquet and test.parquet).
# Check before you launch (offline, no GPU, nothing downloaded):  bash recipes/rloo/run_qwen3_8b.sh --dry-run
# Extra arguments are config overrides, e.g.: bash recipes/rloo/run_qwen3_8b.sh trainer.total_steps=20
# The keys below are RLOO's 8B deltas: the algorithm is recipes/rloo/config.yaml's, the shared 8B keys
# (model, lengths, vLLM, lr) core/config/presets/qwen3_8b.yaml's.
# total_steps: 15 epochs of GSM8K's 7473 train prompts at 1024 per step (7 full batches) = 105.
# micro_batch_size 32: a mini-batch is 256 × 5 = 1280 sequences, 160 per GPU, so 5 accumulation steps.
exec bash "$(dirname "$0")/../launch_qwen3_8b.sh" rloo \
    data.train_batch_size=1024 \
    rollout.n=5 \
    actor.ppo_mini_batch_size=256 \
    actor.micro_batch_size=32 \
    trainer.total_steps=105 \
    tracking.run_name=rloo-qwen3-8b \
    "$@"
