#!/usr/bin/env bash
# Each recipe's run_qwen3_8b.sh for a few steps on this node's GPUs, under torchrun and under Ray, with
# random-init Qwen3-8B weights built from bench/configs/qwen3-8b (nothing to download but GSM8K, which
# `recipezoo data gsm8k` fetches when DATA holds no parquet). Writes results/scale/*.json; then
#   python -m bench.scale.report     # results/scale/README.md and the plot
# Setup on a GPU node with internet:  pip install -e . -r bench/requirements-gpu.txt
# Usage: bash bench/scale/suite.sh [--recipes dapo grpo ...] [--controllers torchrun ray] [--steps 3] [-- overrides]
set -euo pipefail
cd "$(dirname "$0")/../.."
# Keep NVLink multicast off where the host's GPUs are shared with others; Ray's workers inherit it.
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0} TORCH_SYMM_MEM_DISABLE_MULTICAST=${TORCH_SYMM_MEM_DISABLE_MULTICAST:-1} \
    NVSHMEM_DISABLE_NVLS=${NVSHMEM_DISABLE_NVLS:-1} PYTHONUNBUFFERED=1 RAY_AUTH_MODE=${RAY_AUTH_MODE:-disabled}
exec python3 -m bench.scale.suite "$@"
