#!/usr/bin/env bash
# A candidate pretrained model's greedy accuracy on a reasoning-gym suite before any RL, on CPU or GPU: the first
# PER_TASK test problems of each of the suite's tasks (the same problems as its leaderboard's test set, which holds
# 100 per task), generated and scored by `recipezoo eval` into OUT_JSON, and beside it OUT.md: per task the prompts,
# the accuracy, the constant-answer share of those problems and the task's settings (bench/leaderboard/suite_candidates_table.py).
# Used to choose a suite's model and its tasks' difficulties (results/leaderboard/reasoning_gym*/candidates).
#     bash bench/leaderboard/suite_candidates.sh MODEL OUT_JSON [GGUF_FILE]     # MODEL: HF id, dir or pypi:// name
# Environment: SUITE (default reasoning-gym; bench/leaderboard/suites.py), PER_TASK (default 20), ROLLOUT (default hf),
# DEVICE (default auto), BATCH (prompts per generate call, default 64; 16 is faster on a CPU, where the hf rollout
# keeps every step's logits of the whole batch), WORK (default /tmp/suite_candidates).
set -euo pipefail
cd "$(dirname "$0")/../.."
model=$1 out=$2 gguf=${3:-}
suite=${SUITE:-reasoning-gym} per_task=${PER_TASK:-20} rollout=${ROLLOUT:-hf} device=${DEVICE:-auto} batch=${BATCH:-64}
work=${WORK:-/tmp/suite_candidates}
lines=$(SUITE=$suite "${PYTHON:-python3}" - <<'PY'
import os
from bench.leaderboard.suites import SUITES
suite = SUITES[os.environ["SUITE"]]
print(suite.val_file)
print("\n".join(suite.reasoning_gym_argv("DATA")))
PY
)
mapfile -t lines <<<"$lines"
test_file=${lines[0]} suite_argv=("${lines[@]:1}")
# The suite's own data command with --test-size PER_TASK: the test problems are drawn first, so these are the
# first PER_TASK of each task's 100; one training row per task is all it writes besides. Its --max-constant-share
# is left out: that limit holds for the suite's 100 test rows, and the shares printed for fewer mean less.
argv=()
for ((i = 0; i < ${#suite_argv[@]}; i++)); do
    case ${suite_argv[$i]} in
        DATA/*) argv+=("$work/data/${suite_argv[$i]#DATA/}") ;;
        --test-size) argv+=(--test-size "$per_task") && i=$((i + 1)) ;;
        --size) argv+=(--size 1) && i=$((i + 1)) ;;
        --max-constant-share) i=$((i + 1)) ;;
        *) argv+=("${suite_argv[$i]}") ;;
    esac
done
"${PYTHON:-python3}" -m core.cli "${argv[@]}"
"${PYTHON:-python3}" -m core.cli eval --model "$model" ${gguf:+--gguf-file "$gguf"} --data "$work/data/$test_file" \
    --temperature 0 --max-tokens 256 --rollout "$rollout" --device "$device" --batch-size "$batch" --no-mlflow --out "$out"
"${PYTHON:-python3}" -m bench.leaderboard.suite_candidates_table "$out" "$work/data/$test_file" \
    "SUITE=$suite PER_TASK=$per_task ROLLOUT=$rollout DEVICE=$device BATCH=$batch bash bench/leaderboard/suite_candidates.sh $*"
