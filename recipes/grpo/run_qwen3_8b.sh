#!/usr/bin/env bash
# GRPO on GSM8K with Qwen/Qwen3-8B: the real run, batch sizes in the spirit of the published verl
# GSM8K GRPO examples (1024 prompts × 5 samples per step, KL loss k3 0.001, lr 1e-6).
# Launch: bash recipes/grpo/run_qwen3_8b.sh
# Hardware: 1 node × 8 GPUs with 80 GB each (A100/H100 80GB).
#   Another GPU count: NGPUS=2 bash <this script> data.train_batch_size=... (bench/scale/suite.sh shows the 2-GPU settings).
# At 0.5B here: the GSM8K block of recipes/grpo/README.md (Qwen2.5-Coder-0.5B-Instruct on one H200,
#   generated from results/leaderboard/gsm8k_coder).
# verl's table (docs/algo/baseline.md, GSM8K test): Qwen2.5-0.5B-Instruct 36.4 -> 54.3 with GRPO-LoRA,
#   Qwen2.5-1.5B-Instruct 77.9 with GRPO-LoRA.
# Data: prepare GSM8K in verl's schema first:  recipezoo data gsm8k --out $HOME/data/gsm8k
#       (or set DATA=/path/to/dir holding train.parquet and test.parquet).
# Check before you launch (offline, no GPU, nothing downloaded):  bash recipes/grpo/run_qwen3_8b.sh --dry-run
# Extra arguments are config overrides, e.g.: bash recipes/grpo/run_qwen3_8b.sh trainer.total_steps=20
# The same run with a GRPO variant's loss: RECIPE=recipes/grpo/<variant>.yaml (run_qwen3_8b_gspo.sh does this).
# The keys below are GRPO's 8B deltas: the algorithm is recipes/grpo/config.yaml's, the shared 8B keys
# (model, lengths, vLLM, lr) core/config/presets/qwen3_8b.yaml's.
# total_steps: 15 epochs of GSM8K's 7473 train prompts at 1024 per step (7 full batches) = 105.
# micro_batch_size 32: a mini-batch is 256 × 5 = 1280 sequences, 160 per GPU, so 5 accumulation steps.
exec bash "$(dirname "$0")/../launch_qwen3_8b.sh" "${RECIPE:-grpo}" \
    data.train_batch_size=1024 \
    rollout.n=5 \
    actor.ppo_mini_batch_size=256 \
    actor.micro_batch_size=32 \
    trainer.total_steps=105 \
    tracking.run_name="${RUN_NAME:-grpo-qwen3-8b}" \
    "$@"
