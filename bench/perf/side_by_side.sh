#!/usr/bin/env bash
# Ours vs verl vs TRL on one GPU, one call, at two shapes (bench/perf/side_by_side.py): Qwen3-0.6B at 32 prompts × 8,
# responses up to 512, and Qwen3-4B (every weight trained) at 32 prompts × 8, responses up to 1024. The same work
# per step for all three, each at its best documented settings; random-init weights (speed and memory only).
# Writes results/perf/sbs_<shape>_<framework>.json after every step, records them as this call's in
# results/perf/calls.json, then rewrites results/perf/README.md (python -m bench.perf.report), which leads with the
# step-time-by-stage plot of these files.
# Needs one NVIDIA GPU with 141 GB (an H200) for the 4B shape (80 GB for 0.6B) and the environments, each given by
# its python:
#   OURS_PY  pip install -e . -r bench/requirements-gpu.txt          (vllm 0.26.0; TRL 1.16.0 is in it too)
#   VERL_PY  pip install --require-hashes -r bench/requirements-verl.txt && pip install -e .   (flash-attn for
#            verl's packing: bash bench/verl/build_flash_attn.sh; without it verl runs padded and the page says so)
#   TRL_PY   defaults to OURS_PY; liger-kernel installed there turns on TRL's Liger kernels
# Usage: bash bench/perf/side_by_side.sh [--shapes "0.6b 4b"] [--frameworks "ours verl trl"] [--steps 4]
#            [--timeout-s 900] [--background | --status]
#   --background / --status  start the whole call detached (log and done-marker in BENCH_WORK/side_by_side), poll it
# Env: BENCH_WORK=/tmp (inputs, logs), GSM8K_LOCAL=train.jsonl (GSM8K offline), BENCH_CALL (the call id recorded in
#   calls.json: give several invocations the same id to put their columns in one call).
set -uo pipefail
SELF=$(realpath "$0")
cd "$(dirname "$0")/../.." || exit
SHAPES="0.6b 4b" FRAMEWORKS="ours verl trl" STEPS=4 TIMEOUT=900 MODE=run ARGS=("$@")
while [ $# -gt 0 ]; do
    case "$1" in
        --shapes) SHAPES=$2; shift 2 ;;
        --frameworks) FRAMEWORKS=$2; shift 2 ;;
        --steps) STEPS=$2; shift 2 ;;
        --timeout-s) TIMEOUT=$2; shift 2 ;;
        --background) MODE=background; shift ;;
        --status) MODE=status; shift ;;
        *) echo "side_by_side.sh: unknown argument $1 (see the header of bench/perf/side_by_side.sh)" >&2; exit 2 ;;
    esac
done
export BENCH_WORK=${BENCH_WORK:-/tmp}
DIR="$BENCH_WORK/side_by_side"
mkdir -p "$DIR"
source bench/common/detached.sh
case $MODE in
    status)
        detached_state "$DIR" call
        grep -E "^(==|ours|verl|trl) |[Ee]rror" "$DIR/call.log" 2>/dev/null | tail -n 20
        exit 0 ;;
    background)
        rest=()
        for arg in "${ARGS[@]}"; do [ "$arg" = --background ] || rest+=("$arg"); done
        detached_start "$DIR" call "bash bench/perf/side_by_side.sh --status" "$SELF" "${rest[@]}"
        exit ;;
esac
export VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1 RAY_AUTH_MODE=${RAY_AUTH_MODE:-disabled} \
    NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0} TORCH_SYMM_MEM_DISABLE_MULTICAST=${TORCH_SYMM_MEM_DISABLE_MULTICAST:-1} \
    NVSHMEM_DISABLE_NVLS=${NVSHMEM_DISABLE_NVLS:-1} PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
OURS_PY=${OURS_PY:-$(command -v python3)}
VERL_PY=${VERL_PY:-$OURS_PY}
TRL_PY=${TRL_PY:-$OURS_PY}
export BENCH_CALL=${BENCH_CALL:-$(date -u +%Y%m%dT%H%M%SZ)-$(hostname -s)}
touch "$DIR/call.start"
source bench/common/gpu_inputs.sh
with() { PATH="$(dirname "$1"):$PATH" "${@:2}"; }  # with PYTHON CMD...: CMD with that env's python3 first
DATA=$(with "$OURS_PY" gsm8k_train512) || { echo "could not make the GSM8K prompts" >&2; exit 1; }
status=0
for shape in $SHAPES; do
    config=$("$OURS_PY" -c "from bench.perf.side_by_side import SHAPES; print(SHAPES['$shape'].config)") || exit 2
    model=$(with "$OURS_PY" random_model "$config") || { echo "could not make the $config model" >&2; exit 1; }
    # shellcheck disable=SC2086  # FRAMEWORKS is a list
    "$OURS_PY" -m bench.perf.side_by_side_run --shape "$shape" --frameworks $FRAMEWORKS --model-dir "$model" \
        --data "$DATA" --steps "$STEPS" --timeout-s "$TIMEOUT" --ours-python "$OURS_PY" --verl-python "$VERL_PY" \
        --trl-python "$TRL_PY" --out results/perf --work "$DIR" || status=1
done
"$OURS_PY" -m bench.common.suite_calls --dir results/perf --call "$BENCH_CALL" --newer "$DIR/call.start"
"$OURS_PY" -m bench.perf.report
exit $status
