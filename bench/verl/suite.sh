#!/usr/bin/env bash
# Ours vs verl vs TRL on the same GPUs in one call, then the side-by-side table in results/perf/README.md:
#   1 GPU:  GRPO steps (Qwen3-0.6B, 32 prompts × 8): ours and TRL (bench/perf/e2e_suite.sh), ours again in
#           verl's environment (vLLM 0.24.0), verl's main_ppo (bench/verl/grpo_gpu.py --shape grpo)
#   2 GPUs: DAPO steps (Qwen3-8B, 16 prompts × 16, responses up to 2048): ours (bench/scale/suite.py) and
#           verl (--shape dapo8b); skipped on a machine with fewer than 2 GPUs
# Writes results/perf/{e2e_ours,e2e_trl,e2e_ours_vllm024,e2e_verl,dapo8b_ours,dapo8b_verl}.json (recorded as this call's
# in results/perf/calls.json: bench/common/suite_calls.py), and beside them
# {grpo,dapo8b}_numerics.json: ours' run saves its step-2 batch (trainer.save_batch_step), then, in verl's environment,
# bench/verl/log_probs.py computes verl's old log-probs of it and bench/verl/numerics.py compares both frameworks'
# old log-probs, advantages and loss on it (a failure is recorded there; the suite goes on).
# Needs: NVIDIA GPUs (80 GB for the GRPO steps; the 8B steps need 2 with more, e.g. H200), internet (pip, GSM8K),
# Python 3.12. The two environments are made on first use under VENVS, or given:
#   OURS_PY=/path/to/python  ours:  pip install -e . -r bench/requirements-gpu.txt
#   VERL_PY=/path/to/python  verl:  pip install --require-hashes -r bench/requirements-verl.txt, pip install -e .,
#                                   flash-attn: bash bench/verl/build_flash_attn.sh (--flash-attn-wheels DIR here)
# Usage: bash bench/verl/suite.sh [options]
#   --shapes "grpo dapo8b"   --steps 4 (at least 4: the table compares the steps after the first)
#   --packing auto|on|off    verl's sequence packing; auto: on where flash-attn imports and bench/verl/flash_attn_check.py
#                            passes on this GPU; off: padded with SDPA, as the first side-by-side ran
#   --flash-attn-wheels DIR  install flash-attn into verl's env from DIR (or build it there, in the background
#                            while ours' columns run; verl's first launch waits for it) when it is missing
#   --flash-attn-head-dim D  build only head dim D's bf16 kernels (bench/verl/build_flash_attn.sh --head-dim: both
#                            shapes are Qwen3, 128), 396 s on 16 cores (build_flash_attn.sh's header), not the whole library
#   --runs "ours trl ours024 verl"   a subset re-runs only those columns
#   --side-by-side           every column on its own GPUs at the same time (1+1+1 for grpo, 2+2 for dapo8b)
#                            instead of one after another on the same GPUs
#   --background / --status  start the whole call detached (log and done-marker in BENCH_WORK/verl_suite), then
#                            poll it: the 8B verl run alone takes ~9 min to its first step
# Env: VERL_SUITE_TIMEOUT=1800 s per verl run, BENCH_WORK=/tmp for inputs and logs, VENVS, BENCH_CALL: the id
#   results/perf/calls.json records for the files this call writes (default: start time and host); give several
#   invocations on one machine the same id to compare their columns (`--runs verl` after `--runs "ours ours024"`,
#   which can run while bench/verl/build_flash_attn.sh --background builds; ours' numerics batch is scored then).
set -uo pipefail
SELF=$(realpath "$0")
cd "$(dirname "$0")/../.." || exit
ROOT=$PWD
VENVS=${VENVS:-$HOME/.cache/recipezoo-bench}
STEPS=4 SHAPES=" grpo dapo8b " TIMEOUT=${VERL_SUITE_TIMEOUT:-1800}
PACKING=auto WHEELS="" FLASH_HEAD_DIM="" RUNS=" ours trl ours024 verl " SIDE_BY_SIDE=0 MODE=run ARGS=("$@")
while [ $# -gt 0 ]; do
    case "$1" in
        --shapes) SHAPES=" $2 "; shift 2 ;;
        --steps) STEPS=$2; shift 2 ;;
        --packing) PACKING=$2; shift 2 ;;
        --flash-attn-wheels) WHEELS=$2; shift 2 ;;
        --flash-attn-head-dim) FLASH_HEAD_DIM=$2; shift 2 ;;
        --runs) RUNS=" $2 "; shift 2 ;;
        --side-by-side) SIDE_BY_SIDE=1; shift ;;
        --background) MODE=background; shift ;;
        --status) MODE=status; shift ;;
        *) echo "verl_suite.sh: unknown argument $1 (see the header of bench/verl/suite.sh)" >&2; exit 2 ;;
    esac
done
[ "$STEPS" -ge 4 ] || { echo "verl_suite.sh: --steps $STEPS: at least 4, so that 3 steps follow the first" >&2; exit 2; }
case $PACKING in auto|on|off) ;; *) echo "verl_suite.sh: --packing auto, on or off, not $PACKING" >&2; exit 2 ;; esac
export BENCH_WORK=${BENCH_WORK:-/tmp}
SUITE_DIR="$BENCH_WORK/verl_suite"
mkdir -p "$SUITE_DIR"
source bench/common/detached.sh

case $MODE in
    status)
        detached_state "$SUITE_DIR" suite
        grep -E "^(==|verl |ours|trl|step )|[Ee]rror|failed|skipped" "$SUITE_DIR/suite.log" 2>/dev/null | tail -n 20
        exit 0 ;;
    background)
        rest=()
        for arg in "${ARGS[@]}"; do [ "$arg" = --background ] || rest+=("$arg"); done
        detached_start "$SUITE_DIR" suite "bash bench/verl/suite.sh --status" "$SELF" "${rest[@]}"
        exit ;;
esac

# The same sampler for every framework (ours turns FlashInfer's off); NVLink multicast off where GPUs are shared.
export VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1 RAY_AUTH_MODE=${RAY_AUTH_MODE:-disabled} \
    NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0} TORCH_SYMM_MEM_DISABLE_MULTICAST=${TORCH_SYMM_MEM_DISABLE_MULTICAST:-1} \
    NVSHMEM_DISABLE_NVLS=${NVSHMEM_DISABLE_NVLS:-1}

venv() {  # venv NAME: a Python 3.12 virtualenv under VENVS, its installs done once (a marker says they finished)
    local dir="$VENVS/$1"
    if [ ! -f "$dir/.installed" ]; then
        "${PYTHON312:-python3.12}" -m venv "$dir" >&2 || return 1
        if [ "$1" = ours ]; then
            "$dir/bin/pip" install -e "$ROOT" -r "$ROOT/bench/requirements-gpu.txt" >&2 || return 1
        else
            "$dir/bin/pip" install --require-hashes -r "$ROOT/bench/requirements-verl.txt" >&2 \
                && "$dir/bin/pip" install -e "$ROOT" >&2 || return 1
        fi
        touch "$dir/.installed"
    fi
    echo "$dir/bin/python3"
}
OURS_PY=${OURS_PY:-$(venv ours)} || { echo "could not make ours' environment" >&2; exit 1; }
VERL_PY=${VERL_PY:-$(venv verl)} || { echo "could not make verl's environment" >&2; exit 1; }
with() { PATH="$(dirname "$1"):$PATH" "${@:2}"; }  # with PYTHON CMD...: CMD with that env's python3 first
wants() { [[ $RUNS == *" $1 "* ]]; }

source bench/verl/flash.sh  # flash_build_start, verl_packing: the build goes on while ours' columns run
verl_ready() {  # VERL_PACKING, once, in this shell, before verl's first launch; false (verl dropped) if it cannot run
    [ -n "${VERL_PACKING:-}" ] && return 0
    CHECK_GPU=${VISIBLE[0]} CHECK_OUT=results/perf/flash_attn_check.txt
    VERL_PACKING=$(verl_packing) && return 0
    RUNS=${RUNS/ verl / }
    return 1
}

source bench/common/gpu_inputs.sh  # random_model, gsm8k_train512: made once under BENCH_WORK, as perf_e2e_suite.sh does
NEXT_GPU=0
IFS=, read -ra VISIBLE <<< "${CUDA_VISIBLE_DEVICES:-$(seq -s, 0 63)}"  # the GPUs the caller gave us, in order
alloc() {  # alloc N: DEVICES = the next N GPUs under --side-by-side (each column its own), else the first N
    local first=$(( SIDE_BY_SIDE ? NEXT_GPU : 0 ))
    NEXT_GPU=$(( first + $1 ))
    DEVICES=$(IFS=,; echo "${VISIBLE[*]:first:$1}")
}
launch() {  # launch N NAME CMD...: CMD on N GPUs; under --side-by-side in the background, beside the others
    alloc "$1"
    echo "== $2 on GPU $DEVICES"
    if [ "$SIDE_BY_SIDE" = 1 ]; then CUDA_VISIBLE_DEVICES=$DEVICES "${@:3}" & else CUDA_VISIBLE_DEVICES=$DEVICES "${@:3}"; fi
}

grpo_shape() {  # one GPU each: ours then TRL, ours on verl's vLLM, verl; the same prompts and random model for all
    local model data ours_runs
    data=$(with "$OURS_PY" gsm8k_train512) && model=$(with "$OURS_PY" random_model qwen3-0.6b) || return 1
    ours_runs=$(for run in ours trl; do wants "$run" && printf '%s ' "$run"; done)
    if [ -n "$ours_runs" ]; then
        launch 1 "$ours_runs" with "$OURS_PY" env E2E_STEPS="$STEPS" E2E_LOGS="$BENCH_WORK" E2E_RUNS="$ours_runs" \
            E2E_OURS_OVERRIDES="$(save_batch grpo)" bash bench/perf/e2e_suite.sh
    fi
    if wants ours024; then
        launch 1 ours024 with "$VERL_PY" env E2E_STEPS="$STEPS" E2E_LOGS="$BENCH_WORK" E2E_RUNS=ours \
            E2E_OURS_NAME=e2e_ours_vllm024 bash bench/perf/e2e_suite.sh
    fi
    if wants verl && verl_ready; then launch 1 "verl grpo" verl_run grpo "$model" "$data" e2e_verl; fi
}

dapo8b_shape() {  # two GPUs each: our DAPO launcher as bench/scale/suite.py runs it, and verl's on the same data
    local model data=$BENCH_WORK/gsm8k_splits
    model=$(with "$OURS_PY" random_model qwen3-8b) || return 1
    for split in train test; do  # made before the runs, which may start together
        [ -f "$data/$split.parquet" ] || "$OURS_PY" -m core.cli data gsm8k --split "$split" --out "$data" || return 1
    done
    if wants ours; then launch 2 "ours dapo8b" ours_dapo8b "$data"; fi
    if wants verl && verl_ready; then
        launch 2 "verl dapo8b" verl_run dapo8b "$model" "$data/train.parquet" dapo8b_verl
    fi
}

ours_dapo8b() {
    with "$OURS_PY" bash bench/scale/suite.sh --recipes dapo --controllers torchrun --gpus 2 --steps "$STEPS" \
        --no-raw-vllm --data "$1" --work "$SUITE_DIR/scale" --out "$SUITE_DIR/scale" $(save_batch dapo8b) \
        && cp "$SUITE_DIR/scale/dapo_qwen3-8b_2gpu_torchrun.json" results/perf/dapo8b_ours.json \
        || echo "ours (dapo8b) failed: see $SUITE_DIR/scale/logs" >&2
}

save_batch() {  # save_batch SHAPE: the overrides that make ours' run save its step-2 batch for the numerics
    rm -f "$SUITE_DIR/numerics/$1/batch_step2.pt"  # an earlier call's batch is not this run's
    echo "trainer.save_batch_step=2 trainer.save_batch_dir=$SUITE_DIR/numerics/$1"
}

numerics() {  # numerics SHAPE MODEL: verl's and our old log-probs, advantages and loss on ours' step-2 batch, both
              # forwards loading MODEL, into results/perf/SHAPE_numerics.json; a failure is written there instead
    local dir=$SUITE_DIR/numerics/$1 out=results/perf/$1_numerics.json gpu=${VISIBLE[0]}
    echo "== numerics $1 on GPU $gpu (log: $dir/numerics.log)"
    if [ ! -f "$dir/batch_step2.pt" ]; then numerics_failed "$out" "ours saved no step-2 batch ($dir)"; return; fi
    if CUDA_VISIBLE_DEVICES=$gpu "$VERL_PY" -m bench.verl.log_probs --shape "$1" --batch "$dir/batch_step2.pt" \
            --model-dir "$2" --packing "${VERL_PACKING:-$PACKING}" --out "$dir/verl_log_probs.pt" \
            >"$dir/numerics.log" 2>&1 \
        && CUDA_VISIBLE_DEVICES=$gpu "$VERL_PY" -m bench.verl.numerics --batch "$dir/batch_step2.pt" --model-dir "$2" \
            --verl-log-probs "$dir/verl_log_probs.pt" --out "$out" >>"$dir/numerics.log" 2>&1; then
        echo "numerics $1: $(tail -n 1 "$dir/numerics.log")"
    else
        numerics_failed "$out" "$(tail -n 5 "$dir/numerics.log")"
    fi
}
numerics_failed() {  # numerics_failed OUT WHY: the json the report reads, saying why there are no numbers
    echo "numerics failed: $2" >&2
    "$OURS_PY" -c 'import json, sys; open(sys.argv[1], "w").write(json.dumps({"error": sys.argv[2]}) + "\n")' "$1" "$2"
}

verl_run() {  # verl_run SHAPE MODEL DATA NAME: verl's main_ppo, its json into results/perf/NAME.json
    "$VERL_PY" -m bench.verl.grpo_gpu --shape "$1" --model-dir "$2" --data "$3" --steps "$STEPS" \
        --timeout-s "$TIMEOUT" --packing "$VERL_PACKING" --out "$SUITE_DIR/$1"
    cp "$SUITE_DIR/$1/verl.json" "results/perf/$4.json"  # written with verl's error when it failed
}

if wants verl; then flash_build_start || echo "== the flash-attn build did not start: verl runs as verl_packing finds it" >&2; fi
RAN=""  # the shapes that ran, whose ours' batch the numerics score
if [[ $SHAPES == *" grpo "* ]]; then grpo_shape; RAN+=" grpo"; fi
if [[ $SHAPES == *" dapo8b "* ]]; then
    gpus=$(nvidia-smi --list-gpus 2>/dev/null | wc -l)
    if [ "$gpus" -ge $(( SIDE_BY_SIDE ? NEXT_GPU + 4 : 2 )) ]; then dapo8b_shape; RAN+=" dapo8b"
    else echo "dapo8b skipped: it needs 2 GPUs (4 beside grpo's under --side-by-side), this machine has $gpus" >&2; fi
fi
wait  # the columns started side by side
if wants ours; then  # one GPU each, after the runs: the models the columns loaded (dapo8b's ours drew its own weights)
    for shape in $RAN; do
        model=$(with "$OURS_PY" random_model "$([ "$shape" = grpo ] && echo qwen3-0.6b || echo qwen3-8b)") \
            && numerics "$shape" "$model"
    done
fi
"$OURS_PY" -m bench.common.suite_calls --dir results/perf --call "$BENCH_CALL" --newer "$SUITE_DIR/call.start"
"$OURS_PY" -m bench.perf.report
