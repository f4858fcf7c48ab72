#!/usr/bin/env bash
# LoRA GRPO with Qwen3-8B (random init from bench/configs/qwen3-8b, nothing to download) on one GPU with vLLM
# colocated: 3 steps with the weight sync as merged weights, 3 with the adapter alone, each run stopped after
# --timeout-s (300 s), on one H100 or H200. Writes results/lora/*.json and
# results/lora/README.md (python -m bench.lora.report rebuilds it); a failed run is reported and skipped.
# Setup on a GPU machine:  pip install -e . -r bench/requirements-gpu.txt   (peft among them)
# Beside it, the same work with full weights on 2 GPUs (torchrun; 8B needs its optimizer state in host memory on
# 80 GB GPUs):  bash bench/lora/suite.sh --full-weights --gpus 2 -- actor.cpu_offload=true
# Usage: bash bench/lora/suite.sh [--syncs merged adapter] [--steps 3] [--rank 16] [-- overrides]
set -euo pipefail
cd "$(dirname "$0")/../.."
# NVLink multicast off where the host's GPUs are shared with others (the --full-weights run's NCCL).
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0} TORCH_SYMM_MEM_DISABLE_MULTICAST=${TORCH_SYMM_MEM_DISABLE_MULTICAST:-1} \
    NVSHMEM_DISABLE_NVLS=${NVSHMEM_DISABLE_NVLS:-1}
exec python3 -m bench.lora.suite "$@"
