#!/usr/bin/env bash
# Ours vs verl vs TRL on the same GPUs in one call, then the side-by-side table in results/perf/README.md:
#   1 GPU:  one GRPO step (Qwen3-0.6B, 32 prompts × 8): ours and TRL (bench/perf_e2e_suite.sh), ours again in
#           verl's environment (vLLM 0.24.0), verl's main_ppo (bench/verl_grpo_gpu.py --shape grpo)
#   2 GPUs: one DAPO step (Qwen3-8B, 16 prompts × 16, responses up to 2048): ours (bench/scale_suite.py) and
#           verl (--shape dapo8b); skipped on a machine with fewer than 2 GPUs
# Writes results/perf/{e2e_ours,e2e_trl,e2e_ours_vllm024,e2e_verl,dapo8b_ours,dapo8b_verl}.json.
# Needs: NVIDIA GPUs (80 GB for the GRPO step; the 8B step needs 2 with more, e.g. H200), internet (pip, GSM8K),
# Python 3.12. The two environments are made on first use under VENVS, or given:
#   OURS_PY=/path/to/python  ours:  pip install -e . -r bench/requirements-gpu.txt
#   VERL_PY=/path/to/python  verl:  pip install --require-hashes -r bench/requirements-verl.txt, then
#                                   flash-attn ($VERL_FLASH_ATTN_WHEEL) and ours (pip install -e .)
# Usage: bash bench/verl_suite.sh   (VERL_SUITE_STEPS=4, VERL_SUITE_SHAPES="grpo dapo8b",
#                                    VERL_SUITE_TIMEOUT=1800 s per verl run, BENCH_WORK=/tmp for inputs and logs)
set -uo pipefail
cd "$(dirname "$0")/.." || exit
ROOT=$PWD
VENVS=${VENVS:-$HOME/.cache/recipezoo-bench}
STEPS=${VERL_SUITE_STEPS:-4}
SHAPES=" ${VERL_SUITE_SHAPES:-grpo dapo8b} "
TIMEOUT=${VERL_SUITE_TIMEOUT:-1800}
export BENCH_WORK=${BENCH_WORK:-/tmp}
# The prebuilt flash-attn 2.8.3 for torch 2.11 / CUDA 13.0 / cp312 that verl's own [fsdp] extra installs.
VERL_FLASH_ATTN_WHEEL=${VERL_FLASH_ATTN_WHEEL:-https://github.com/mjun0812/flash-attention-prebuild-wheels/releases/download/v0.9.4/flash_attn-2.8.3+cu130torch2.11-cp312-cp312-linux_x86_64.whl}
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
                && "$dir/bin/pip" install --no-deps "$VERL_FLASH_ATTN_WHEEL" >&2 \
                && "$dir/bin/pip" install -e "$ROOT" >&2 || return 1
        fi
        touch "$dir/.installed"
    fi
    echo "$dir/bin/python3"
}
OURS_PY=${OURS_PY:-$(venv ours)} || { echo "could not make ours' environment" >&2; exit 1; }
VERL_PY=${VERL_PY:-$(venv verl)} || { echo "could not make verl's environment" >&2; exit 1; }
with() { PATH="$(dirname "$1"):$PATH" "${@:2}"; }  # with PYTHON CMD...: CMD with that env's python3 first

source bench/gpu_inputs.sh  # random_model, gsm8k_train512: made once under BENCH_WORK, as perf_e2e_suite.sh does
SUITE_DIR="$BENCH_WORK/verl_suite"

grpo_shape() {  # one GPU: ours, TRL, ours on verl's vLLM, verl; the same prompts and random model for all
    export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
    with "$OURS_PY" env E2E_STEPS="$STEPS" E2E_LOGS="$BENCH_WORK" bash bench/perf_e2e_suite.sh
    with "$VERL_PY" env E2E_STEPS="$STEPS" E2E_LOGS="$BENCH_WORK" E2E_RUNS=ours E2E_OURS_NAME=e2e_ours_vllm024 \
        bash bench/perf_e2e_suite.sh
    "$VERL_PY" bench/verl_grpo_gpu.py --shape grpo --model-dir "$(with "$OURS_PY" random_model qwen3-0.6b)" \
        --data "$(with "$OURS_PY" gsm8k_train512)" --steps "$STEPS" --timeout-s "$TIMEOUT" --out "$SUITE_DIR/grpo"
    cp "$SUITE_DIR/grpo/verl.json" results/perf/e2e_verl.json  # written with verl's error when it failed
}

dapo8b_shape() {  # two GPUs: our DAPO launcher as bench/scale_suite.py runs it, then verl's on the same data
    export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0,1}
    with "$OURS_PY" bash bench/scale_suite.sh --recipes dapo --controllers torchrun --gpus 2 --steps "$STEPS" \
        --no-raw-vllm --data "$BENCH_WORK/gsm8k_splits" --work "$SUITE_DIR/scale" --out "$SUITE_DIR/scale" \
        && cp "$SUITE_DIR/scale/dapo_qwen3-8b_2gpu_torchrun.json" results/perf/dapo8b_ours.json \
        || echo "ours (dapo8b) failed: see $SUITE_DIR/scale/logs" >&2
    "$VERL_PY" bench/verl_grpo_gpu.py --shape dapo8b --model-dir "$(with "$OURS_PY" random_model qwen3-8b)" \
        --data "$BENCH_WORK/gsm8k_splits/train.parquet" --steps "$STEPS" --timeout-s "$TIMEOUT" --out "$SUITE_DIR/dapo8b"
    cp "$SUITE_DIR/dapo8b/verl.json" results/perf/dapo8b_verl.json
}

if [[ $SHAPES == *" grpo "* ]]; then
    (grpo_shape)
fi
if [[ $SHAPES == *" dapo8b "* ]]; then
    gpus=$(nvidia-smi --list-gpus 2>/dev/null | wc -l)
    if [ "$gpus" -ge 2 ]; then (dapo8b_shape); else echo "dapo8b skipped: it needs 2 GPUs, this machine has $gpus" >&2; fi
fi
"$OURS_PY" bench/perf_report.py
