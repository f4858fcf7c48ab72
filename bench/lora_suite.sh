#!/usr/bin/env bash
# LoRA GRPO with Qwen3-8B (random init from bench/configs/qwen3-8b, nothing to download) on one GPU with vLLM
# colocated: 3 steps with the weight sync as merged weights, 3 with the adapter alone, each run stopped after
# --timeout-s (300 s), on one H100 or H200. Writes results/lora/*.json and
# results/lora/README.md (python bench/lora_report.py rebuilds it); a failed run is reported and skipped.
# Setup on a GPU machine:  pip install -e . -r bench/requirements-gpu.txt   (peft among them)
# Usage: bash bench/lora_suite.sh [--syncs merged adapter] [--steps 3] [--rank 16] [-- overrides]
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
exec python3 bench/lora_suite.py "$@"
