#!/usr/bin/env bash
# A candidate pretrained model's greedy accuracy on the reasoning-gym suite before any RL, on CPU or GPU: the first
# PER_TASK test problems of each task (the same problems as the leaderboard's test set, which holds 100 per task),
# generated and scored by `recipezoo eval` into OUT_JSON. Used to choose the suite's model (results/reasoning_gym).
#     bash bench/suite_candidates.sh MODEL OUT_JSON [GGUF_FILE]     # MODEL: HF id, dir or pypi:// name
# Environment: PER_TASK (default 20), ROLLOUT (default hf), DEVICE (default auto), WORK (default /tmp/suite_candidates).
set -euo pipefail
cd "$(dirname "$0")/.."
model=$1 out=$2 gguf=${3:-}
work=${WORK:-/tmp/suite_candidates}
argv=$("${PYTHON:-python3}" - <<'PY'
from bench.leaderboard_suites import SUITES
print("\n".join(SUITES["reasoning-gym"].data_commands("DATA", None)[-1][1]))
PY
)
mapfile -t argv <<<"$argv"
# The suite's own data command with --test-size PER_TASK: the test problems are drawn first, so these are the
# first PER_TASK of each task's 100; one training row per task is all it writes besides.
for i in "${!argv[@]}"; do
    case ${argv[$i]} in DATA/*) argv[$i]=$work/data/${argv[$i]#DATA/} ;; esac
    [ "${argv[$i]}" = --test-size ] && argv[$((i + 1))]=${PER_TASK:-20}
    [ "${argv[$i]}" = --size ] && argv[$((i + 1))]=1
done
"${PYTHON:-python3}" -m core.cli "${argv[@]}"
"${PYTHON:-python3}" -m core.cli eval --model "$model" ${gguf:+--gguf-file "$gguf"} --data "$work/data/reasoning_gym/test.parquet" \
    --temperature 0 --max-tokens 256 --rollout "${ROLLOUT:-hf}" --device "${DEVICE:-auto}" --no-mlflow --out "$out"
