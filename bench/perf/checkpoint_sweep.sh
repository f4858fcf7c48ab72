#!/usr/bin/env bash
# Update MFU and peak memory per actor.checkpoint_layers=N at the side by side's larger shape: Qwen3-4B, every weight
# trained, one GPU (141 GB: an H200), 256 RL-shaped rows (bench/perf/train_mfu_gpu.py), compiled decoder layers,
# 16384-token micro-batches. N = 0 (no checkpointing: may run out of memory, which the json records), the first N
# layers, and all 36. Writes results/perf/train_qwen3-4b-ckpt.json after every variant; then python -m bench.perf.report.
# The 8B scripts' plan at the N chosen (every row under 95% of its GPUs' memory):
#   python -m bench.scale.plan --gpus --full-gpus 8 --tag ckptN actor.checkpoint_layers=N
# Usage: bash bench/perf/checkpoint_sweep.sh [N ...]   (default: 0 9 18 26 36; 26 is the side by side's plan at 4B)
set -uo pipefail
cd "$(dirname "$0")/../.." || exit
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
variants=()
for n in "${@:-0 9 18 26 36}"; do
    for layers in $n; do
        case $layers in
            0) variants+=("ours_compiled@16384") ;;
            36) variants+=("ours_compiled_ckpt@16384") ;;
            *) variants+=("ours_compiled_ckpt$layers@16384") ;;
        esac
    done
done
python3 -m bench.perf.train_mfu_gpu --config-dir bench/configs/qwen3-4b --name train_qwen3-4b-ckpt --out results/perf \
    --steps 2 --variants "$(IFS=,; echo "${variants[*]}")"
python3 -m bench.perf.report
