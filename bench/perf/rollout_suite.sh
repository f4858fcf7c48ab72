#!/usr/bin/env bash
# Rollout tokens/s (raw vLLM vs our vLLM backend vs our HF backend) and FSDP2 -> vLLM weight sync GB/s,
# Qwen3-0.6B, -1.7B and -8B architectures (bench/configs/) with dummy weights, one GPU (80 GB; the committed
# runs on an H100). Writes results/perf/rollout_<model>.json; then `python -m bench.perf.report`.
# Setup on a GPU machine with internet:  pip install -e . -r bench/requirements-gpu.txt
# Usage: bash bench/perf/rollout_suite.sh [extra rollout.py args]
#   PERF_ROLLOUT_SPECS="qwen3-0.6b:0:3 ..."  model:timeout_s:rounds (timeout 0: no limit)
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1
CONFIGS=${PERF_CONFIGS:-bench/configs}
LOG=${PERF_LOG:-/tmp/rollout.log}
for spec in ${PERF_ROLLOUT_SPECS:-qwen3-0.6b:0:3 qwen3-1.7b:0:3 qwen3-8b:0:2}; do
    IFS=: read -r model seconds rounds <<<"$spec"
    timeout "$seconds" python3 -m bench.perf.rollout --config-dir "$CONFIGS/$model" --name "$model" \
        --rounds "$rounds" --out results/perf "$@" >>"$LOG" 2>&1 || echo "perf_rollout $model failed: $?"
    grep -E '^\{"model"|Error|error' "$LOG" | tail -5
done
