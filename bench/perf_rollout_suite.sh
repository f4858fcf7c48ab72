#!/usr/bin/env bash
# Rollout tokens/s (raw vLLM vs our vLLM backend vs our HF backend) and FSDP2 -> vLLM weight sync GB/s,
# Qwen3-0.6B, -1.7B and -8B configs with dummy weights, one GPU, one device call after the bundle is unpacked.
# Writes results/perf/rollout_<model>.json (and $OUT).
# Usage (device): sh .device-bundle/vllm-rl/c02/stage.sh --unpack && bash bench/perf_rollout_suite.sh
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}" VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1 \
    PYTHONUNBUFFERED=1
CONFIGS=${PERF_CONFIGS:-.device-bundle/perf-configs}
LOG=${OUT:-/tmp}/rollout.log
# model:timeout_s:rounds, smallest first so a slow start of the 8B cannot cost the others
for spec in ${PERF_ROLLOUT_SPECS:-qwen3-0.6b:150:3 qwen3-1.7b:170:3 qwen3-8b:260:2}; do
    IFS=: read -r model seconds rounds <<<"$spec"
    timeout "$seconds" python3 bench/perf_rollout.py --config-dir "$CONFIGS/$model" --name "$model" \
        --rounds "$rounds" --out results/perf "$@" >>"$LOG" 2>&1 || echo "perf_rollout $model failed: $?"
    grep -E '^\{"model"|Error|error' "$LOG" | tail -5
    if [ -n "${OUT:-}" ] && [ -f "results/perf/rollout_$model.json" ]; then cp "results/perf/rollout_$model.json" "$OUT/"; fi
done
