#!/usr/bin/env bash
# PPO on GSM8K with Qwen/Qwen3-8B: the real run, in the spirit of verl's GSM8K PPO example
# (GAE γ = λ = 1, n=1, 1024 prompts per step, actor lr 1e-6, critic lr 1e-5, no KL).
# Launch: bash recipes/ppo/run_qwen3_8b.sh
# Hardware: 1 node × 8 GPUs with 80 GB each (A100/H100 80GB); actor, rollout and critic share them.
#   Another GPU count: NGPUS=2 bash <this script> data.train_batch_size=... (bench/scale/suite.sh shows the 2-GPU settings).
# At 0.5B here: the GSM8K block of recipes/ppo/README.md (Qwen2.5-Coder-0.5B-Instruct on one H200,
#   generated from results/leaderboard/gsm8k_coder).
# verl's table (docs/algo/baseline.md, GSM8K test): Qwen2.5-0.5B-Instruct 36.4 -> 56.7 with PPO.
# Data: prepare GSM8K in verl's schema first:  recipezoo data gsm8k --out $HOME/data/gsm8k
#       (or set DATA=/path/to/dir holding train.parquet and test.parquet).
# Check before you launch (offline, no GPU, nothing downloaded):  bash recipes/ppo/run_qwen3_8b.sh --dry-run
# Extra arguments are config overrides, e.g.: bash recipes/ppo/run_qwen3_8b.sh trainer.total_steps=20
# The keys below are PPO's 8B deltas: the algorithm is recipes/ppo/config.yaml's, the shared 8B keys
# (model, lengths, vLLM, lr) core/config/presets/qwen3_8b.yaml's.
# total_steps: 15 epochs of GSM8K's 7473 train prompts at 1024 per step (7 full batches) = 105.
# micro_batch_size 16: a mini-batch is 256 × 1 = 256 sequences, 32 per GPU, so 2 accumulation steps
# for the actor and for the critic (a second 8B model with its own optimizer on the same GPUs).
exec bash "$(dirname "$0")/../launch_qwen3_8b.sh" ppo \
    data.train_batch_size=1024 \
    rollout.n=1 \
    actor.ppo_mini_batch_size=256 \
    actor.micro_batch_size=16 \
    critic.lr=1e-5 \
    critic.micro_batch_size=16 \
    trainer.total_steps=105 \
    tracking.run_name=ppo-qwen3-8b \
    "$@"
