#!/usr/bin/env bash
# GRPO's schedules on this node, one after the other at the same settings: sync and one_step_off on all its
# GPUs, then async with partial rollouts, disaggregated, at each rollout+train split. Writes one json per
# run (step metrics and each step's timeline: who computes when) into --out; then
#   python -m bench.async_rl.report     # results/async/README.md and results/async/timeline.png
# Setup on a GPU node with internet:  pip install -e . -r bench/requirements-gpu.txt
# 2 H200s (141 GB; on 80 GB GPUs the launch check refuses 8B at these settings), random-init Qwen3-8B
# (bench/configs/qwen3-8b; nothing to download but GSM8K); one_step_off's engine stays awake beside the update,
# hence the smaller engine share and micro-batch for every run of the folder:
#   bash bench/async_rl/suite.sh --model bench/configs/qwen3-8b --splits 1+1 --prompts 64 --out results/async/2gpu \
#       actor.expandable_segments=true rollout.gpu_memory_utilization=0.25 actor.micro_batch_size=16 \
#       --disaggregated-overrides actor.cpu_offload=true   # 1 training GPU cannot hold 8B's training state
# 4 H200s: bash bench/async_rl/suite.sh --model bench/configs/qwen3-8b --splits 2+2 1+3 --prompts 96 --out results/async/4gpu \
#       actor.expandable_segments=true
# 1 H200 (one GPU holds no 8B training state beside its engine): sync and one_step_off of Qwen3-1.7B, colocated:
#   bash bench/async_rl/suite.sh --model bench/configs/qwen3-1.7b --schedules sync one_step_off --gpus 1 \
#       --controller local --prompts 64 --out results/async/1gpu_1.7b actor.expandable_segments=true
# On a CPU (the embedded tiny model):  bash bench/async_rl/suite.sh --controller local --prompts 8 --n 4 \
#   --response-length 32 --steps 6 --out results/async/cpu_tiny
# A run that reaches --timeout-s ends its step on SIGTERM (or is killed after --stop-grace-s) and keeps its steps.
# Usage: bash bench/async_rl/suite.sh [--model M] [--splits 1+1 ...] [--prompts P] [--n N] [--steps S] [overrides]
set -euo pipefail
cd "$(dirname "$0")/../.."
# Keep NVLink multicast off where the host's GPUs are shared with others; Ray's workers inherit it.
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0} TORCH_SYMM_MEM_DISABLE_MULTICAST=${TORCH_SYMM_MEM_DISABLE_MULTICAST:-1} \
    NVSHMEM_DISABLE_NVLS=${NVSHMEM_DISABLE_NVLS:-1} PYTHONUNBUFFERED=1 RAY_AUTH_MODE=${RAY_AUTH_MODE:-disabled}
exec python3 -m bench.async_rl.suite "$@"
