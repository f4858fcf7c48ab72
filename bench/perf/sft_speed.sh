#!/usr/bin/env bash
# SFT tokens/s/GPU and MFU, recipezoo's SFT step beside TRL's SFTTrainer (its packing, padding-free; liger kernels
# when liger_kernel is installed) and beside that SFTTrainer with our attention kernel, random-init Qwen3-1.7B (and
# -0.6B) from bench/configs/, one GPU, the same rows, micro-batch size and tokens per step (bench/perf/sft_speed.py).
# Writes results/perf/sft/<model>-{ours,trl,trl_varlen}.json, each after every step, then results/perf/sft_speed.md.
# On one H200: ~5 min for qwen3-1.7b without --compile, ~5 for qwen3-0.6b (one model a command keeps each under 10 minutes).
# Setup on a GPU machine:  pip install -e . -r bench/requirements-gpu.txt   (TRL is pinned there)
# Usage: bash bench/perf/sft_speed.sh [extra sft_speed.py args, e.g. --compile --steps 8]
#   SFT_SPEED_MODELS="qwen3-1.7b qwen3-0.6b"  the bench/configs folders to measure
#   SFT_SPEED_TIMEOUT=0                        seconds per model before it is stopped (0: no limit)
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
CONFIGS=${PERF_CONFIGS:-bench/configs}
RESULT_DIR=${SFT_SPEED_OUT:-results/perf/sft}
MODELS_DIR=${SFT_SPEED_MODELS_DIR:-/tmp/recipezoo-random-models}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw --format=csv,noheader || true
for model in ${SFT_SPEED_MODELS:-qwen3-1.7b qwen3-0.6b}; do
    [ -f "$MODELS_DIR/$model/config.json" ] ||
        python3 -m bench.common.random_model --config-dir "$CONFIGS/$model" --out "$MODELS_DIR/$model"
    timeout "${SFT_SPEED_TIMEOUT:-0}" python3 -m bench.perf.sft_speed --model-dir "$MODELS_DIR/$model" \
        --name "$model" --out "$RESULT_DIR" "$@" || echo "sft_speed $model failed: $?"
done
python3 -m bench.perf.sft_speed_report --from "$RESULT_DIR" --out results/perf/sft_speed.md
