#!/usr/bin/env bash
# Log-prob drift over a long run: 200 GRPO steps at the side by side's 0.6B shape (Qwen3-0.6B random-init, 32 prompts
# × 8, responses up to 512, varied reward so every update changes the weights), once without a rollout correction
# and once with algorithm.rollout_correction.mode=tis, both logging rollout/logprob_diff/{mean,max} every step.
# Both runs share one GPU (an H200), at rollout.gpu_memory_utilization=0.25 each. Each writes
# BENCH_WORK/drift/<mode>/grpo.json after every step (bench/common/grpo_vllm_gpu.py); at the end both are copied to
# results/perf/drift_<mode>.json. About 200 × 9-12 s per run: run it detached and poll.
# Usage: bash bench/perf/drift_suite.sh [--steps 200] [--background | --status]
set -uo pipefail
cd "$(dirname "$0")/../.." || exit
STEPS=200 MODE=run
while [ $# -gt 0 ]; do
    case "$1" in
        --steps) STEPS=$2; shift 2 ;;
        --background) MODE=background; shift ;;
        --status) MODE=status; shift ;;
        *) echo "drift_suite.sh: unknown argument $1 (see its header)" >&2; exit 2 ;;
    esac
done
export BENCH_WORK=${BENCH_WORK:-/tmp} PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 \
    VLLM_USE_FLASHINFER_SAMPLER=0
DIR="$BENCH_WORK/drift"
mkdir -p "$DIR"
source bench/common/detached.sh
case $MODE in
    status)
        for mode in none tis; do
            python3 -c 'import json, sys; s = json.load(open(sys.argv[1]))["steps"]; d = s[-1] if s else {}
print(sys.argv[2], len(s), "steps; last logprob_diff mean/max:", d.get("rollout/logprob_diff/mean"), d.get("rollout/logprob_diff/max"))' \
                "$DIR/$mode/grpo.json" "$mode" 2>/dev/null || echo "$mode: no step yet"
        done
        detached_state "$DIR" suite
        exit 0 ;;
    background)
        detached_start "$DIR" suite "bash bench/perf/drift_suite.sh --status" "$0" --steps "$STEPS"
        exit ;;
esac
source bench/common/gpu_inputs.sh
DATA=$(gsm8k_train512) && MODEL=$(random_model qwen3-0.6b) || exit 1
overrides=$(python3 -c 'from bench.perf.side_by_side import SHAPES, ours_overrides
print(" ".join(o for o in ours_overrides(SHAPES["0.6b"]) if not o.startswith("rollout.gpu_memory_utilization")))')
for mode in none tis; do
    # shellcheck disable=SC2086  # overrides is a list
    python3 -m bench.common.grpo_vllm_gpu --model-dir "$MODEL" --data "$DATA" --steps "$STEPS" --out "$DIR/$mode" \
        $overrides rollout.gpu_memory_utilization=0.25 algorithm.rollout_correction.mode=$mode \
        trainer.output_dir="$DIR/$mode/trainer" >"$DIR/$mode.log" 2>&1 &
    sleep 90  # the second engine starts once the first sleeps (vLLM checks the free memory at start)
done
wait
for mode in none tis; do cp "$DIR/$mode/grpo.json" "results/perf/drift_$mode.json" 2>/dev/null; done
