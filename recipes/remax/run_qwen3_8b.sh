#!/usr/bin/env bash
# ReMax on GSM8K with Qwen/Qwen3-8B: the real run, in the spirit of verl's published ReMax example
# (512 prompts × n=4 samples per step plus one greedy baseline rollout each, KL in the reward
# k1 0.001, no KL loss, lr 1e-6).
# Launch: bash recipes/remax/run_qwen3_8b.sh
# Hardware: 1 node × 8 GPUs with 80 GB each (A100/H100 80GB).
#   Another GPU count: NGPUS=2 bash <this script> data.train_batch_size=... (bench/scale/suite.sh shows the 2-GPU settings).
# At 0.5B here: the GSM8K block of recipes/remax/README.md (Qwen2.5-Coder-0.5B-Instruct on one H200,
#   generated from results/leaderboard/gsm8k_coder).
# verl's table (docs/algo/baseline.md) has no GSM8K row of ReMax below 3B; its Qwen2.5-0.5B-Instruct rows:
#   36.4 -> 56.7 with PPO, 54.3 with GRPO-LoRA.
# Data: prepare GSM8K in verl's schema first:  recipezoo data gsm8k --out $HOME/data/gsm8k
#       (or set DATA=/path/to/dir holding train.parquet and test.parquet).
# Check before you launch (offline, no GPU, nothing downloaded):  bash recipes/remax/run_qwen3_8b.sh --dry-run
# Extra arguments are config overrides, e.g.: bash recipes/remax/run_qwen3_8b.sh trainer.total_steps=20
# The keys below are ReMax's 8B deltas: the algorithm is recipes/remax/config.yaml's, the shared 8B keys
# (model, lengths, vLLM, lr) core/config/presets/qwen3_8b.yaml's.
# total_steps: 5 epochs of GSM8K's 7473 train prompts at 512 per step (14 full batches) = 70.
# micro_batch_size 32: a mini-batch is 128 × 4 = 512 sequences, 64 per GPU, so 2 accumulation steps.
exec bash "$(dirname "$0")/../launch_qwen3_8b.sh" remax \
    data.train_batch_size=512 \
    rollout.n=4 \
    actor.ppo_mini_batch_size=128 \
    actor.micro_batch_size=32 \
    trainer.total_steps=70 \
    tracking.run_name=remax-qwen3-8b \
    "$@"
