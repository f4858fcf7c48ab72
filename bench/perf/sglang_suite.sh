#!/usr/bin/env bash
# Rollout tokens/s of our SGLang backend vs raw sglang.Engine.generate, beside our vLLM backend vs raw vLLM: the same
# prompts, lengths and sampling, Qwen3-0.6B, -1.7B and -8B architectures (bench/configs/) with random weights, one
# 80 GB GPU; also the FSDP2 -> engine weight sync in GB/s and the memory sleep frees. One process per (backend,
# model), and each backend in its own Python environment, since SGLang's and vLLM's pins clash:
#   PYTHON_SGLANG  the python of an environment made with: pip install --require-hashes -r bench/requirements-sglang.txt
#   PYTHON_VLLM    the python of an environment made with: pip install -r bench/requirements-gpu.txt
# Either may be a command that starts one, e.g. PYTHON_VLLM="env PYTHONPATH=$PWD:/opt/vllm-packages python3"
# (recipezoo must be importable there: pip install --no-deps -e . in each, or the repo root on its PYTHONPATH).
# Writes results/perf/sglang_rollout_<backend>_<model>.json, then regenerates results/perf/README.md and its plots.
# Usage: PYTHON_SGLANG=/envs/sglang/bin/python PYTHON_VLLM=/envs/vllm/bin/python bash bench/perf/sglang_suite.sh [args]
#   SGLANG_SUITE_MODELS="qwen3-0.6b qwen3-1.7b qwen3-8b"   SGLANG_SUITE_BACKENDS="sglang vllm"
#   extra args go to bench/perf/sglang_rollout.py (e.g. --rounds 2)
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1
PYTHON_SGLANG=${PYTHON_SGLANG:-python3}
PYTHON_VLLM=${PYTHON_VLLM:-python3}
CONFIGS=${PERF_CONFIGS:-bench/configs}
LOG=${SGLANG_SUITE_LOG:-/tmp/sglang_suite.log}
for model in ${SGLANG_SUITE_MODELS:-qwen3-0.6b qwen3-1.7b qwen3-8b}; do
    for backend in ${SGLANG_SUITE_BACKENDS:-sglang vllm}; do
        read -r -a python <<<"$([ "$backend" = sglang ] && echo "$PYTHON_SGLANG" || echo "$PYTHON_VLLM")"
        "${python[@]}" -m bench.perf.sglang_rollout --backend "$backend" --config-dir "$CONFIGS/$model" --name "$model" \
            --out results/perf "$@" >>"$LOG" 2>&1 || echo "sglang_rollout $backend $model failed: $? (log: $LOG)"
        grep -E '^\{"(backend|model)"|Error' "$LOG" | tail -3
    done
done
read -r -a python <<<"$PYTHON_SGLANG"
"${python[@]}" -m bench.perf.report
