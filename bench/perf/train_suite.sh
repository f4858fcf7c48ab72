#!/usr/bin/env bash
# Policy-update tokens/s and MFU, ours vs naive HF, Qwen3-0.6B and -1.7B architectures (bench/configs/), one GPU
# (80 GB; the committed runs on an H100). Writes results/perf/train_<model>.json; then `python -m bench.perf.report`.
# Setup on a GPU machine with internet:  pip install -e . -r bench/requirements-gpu.txt
# Usage: bash bench/perf/train_suite.sh [extra train_mfu_gpu.py args, e.g. --variants ours@16384,naive]
#   PERF_TRAIN_MODELS="qwen3-0.6b qwen3-1.7b"  the bench/configs folders to measure
#   PERF_TRAIN_TIMEOUT=0                       seconds per model before it is stopped (0: no limit)
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
CONFIGS=${PERF_CONFIGS:-bench/configs}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw --format=csv,noheader || true
for model in ${PERF_TRAIN_MODELS:-qwen3-0.6b qwen3-1.7b}; do
    timeout "${PERF_TRAIN_TIMEOUT:-0}" python3 -m bench.perf.train_mfu_gpu --config-dir "$CONFIGS/$model" \
        --name "train_$model" --out results/perf "$@" || echo "train_mfu_gpu $model failed: $?"
done
