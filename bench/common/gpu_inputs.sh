# Inputs the GPU suites make for themselves on a machine with internet (sourced, not run):
#   gsm8k_train512         prints the path of the first 512 GSM8K training prompts in verl's schema
#                          (`recipezoo data gsm8k` fetches GSM8K from the hub once; offline, GSM8K_LOCAL=FILE
#                          names GSM8K's train split as a local .jsonl with its own fields)
#   random_model <name>    prints the path of a random-init model built from bench/configs/<name>
#                          (config.json + the shared Qwen3 tokenizer; no weights to download)
# Both are made once under $BENCH_WORK (default /tmp) and reused.
BENCH_WORK=${BENCH_WORK:-/tmp}

gsm8k_train512() {
    local out="$BENCH_WORK/gsm8k_train512.parquet"
    if [ ! -f "$out" ]; then
        [ -f "$BENCH_WORK/gsm8k/train.parquet" ] \
            || python3 -m core.cli data gsm8k --split train ${GSM8K_LOCAL:+--local "$GSM8K_LOCAL"} \
                --out "$BENCH_WORK/gsm8k" >&2
        python3 - "$BENCH_WORK/gsm8k/train.parquet" "$out" <<'PY'
import sys

import pyarrow.parquet as pq

pq.write_table(pq.read_table(sys.argv[1]).slice(0, 512), sys.argv[2])
PY
    fi
    echo "$out"
}

random_model() {
    local out="$BENCH_WORK/$1-random"
    compgen -G "$out/*.safetensors" >/dev/null || python3 -m bench.common.random_model --config-dir "bench/configs/$1" --out "$out" >&2
    echo "$out"
}
