#!/usr/bin/env bash
# Policy-update tokens/s and MFU, ours vs naive HF, Qwen3-0.6B and -1.7B configs, one GPU, one device call.
# Needs only the device's torch + transformers (no bundle). Writes results/perf/train_<model>.json (and $OUT).
# Usage (device): bash bench/perf_train_suite.sh [extra train_mfu_gpu.py args]
# Config dirs: .device-bundle/perf-configs/<model>/config.json (copied from ../shared/data/hf_configs).
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
CONFIGS=${PERF_CONFIGS:-.device-bundle/perf-configs}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw --format=csv,noheader || true
for model in ${PERF_TRAIN_MODELS:-qwen3-0.6b qwen3-1.7b}; do
    timeout "${PERF_TRAIN_TIMEOUT:-240}" python3 bench/train_mfu_gpu.py --config-dir "$CONFIGS/$model" \
        --name "train_$model" --out results/perf "$@" || echo "train_mfu_gpu $model failed: $?"
    if [ -n "${OUT:-}" ] && [ -f "results/perf/train_$model.json" ]; then cp "results/perf/train_$model.json" "$OUT/"; fi
done
