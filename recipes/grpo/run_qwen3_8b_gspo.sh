#!/usr/bin/env bash
# GSPO (recipes/grpo/gspo.yaml) on GSM8K with Qwen/Qwen3-8B: the GRPO run of run_qwen3_8b.sh (1024 prompts × 5
# samples per step, lr 1e-6) with the GSPO loss and its published settings from gspo.yaml: clip 3e-4/4e-4 on the
# sequence ratio, seq-mean-token-mean, no KL. 1024 prompts in mini-batches of 256 are the paper's 4 updates
# per rollout batch.
# Hardware, data, GPU count and the dry run: as recipes/grpo/run_qwen3_8b.sh, whose run this is.
# Extra arguments are config overrides, e.g.: bash recipes/grpo/run_qwen3_8b_gspo.sh trainer.total_steps=20
exec env RECIPE=recipes/grpo/gspo.yaml RUN_NAME=gspo-qwen3-8b bash "$(dirname "$0")/run_qwen3_8b.sh" "$@"
