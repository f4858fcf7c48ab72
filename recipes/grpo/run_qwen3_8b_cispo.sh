#!/usr/bin/env bash
# CISPO (recipes/grpo/cispo.yaml) on GSM8K with Qwen/Qwen3-8B: the GRPO run of run_qwen3_8b.sh (1024 prompts × 5
# samples per step, lr 1e-6) with the CISPO loss and the settings of cispo.yaml: the importance weight clipped
# at 1 + 0.28 with no lower bound, detached; token-mean; no KL.
# Hardware, data, GPU count and the dry run: as recipes/grpo/run_qwen3_8b.sh, whose run this is.
# Extra arguments are config overrides, e.g.: bash recipes/grpo/run_qwen3_8b_cispo.sh trainer.total_steps=20
exec env RECIPE=recipes/grpo/cispo.yaml RUN_NAME=cispo-qwen3-8b bash "$(dirname "$0")/run_qwen3_8b.sh" "$@"
