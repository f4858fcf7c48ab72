#!/usr/bin/env bash
# End-to-end GRPO step, ours vs TRL's GRPOTrainer (vLLM colocate), same GPU, same work:
# random-init Qwen3-0.6B, GSM8K prompts, 32 prompts × 8 samples per step, ≤ 384 prompt / 512 response tokens,
# temperature 1, one AdamW step per rollout (lr 1e-6, no weight decay, clip 1.0), no KL/reference, token-mean loss,
# bf16 compute over fp32 master weights, vLLM at 40% of the GPU with sleep mode, CUDA graphs on.
# Writes results/perf/e2e_ours.json and results/perf/e2e_trl.json, records them as this call's in
# results/perf/calls.json (bench/common/suite_calls.py); then `python -m bench.perf.report`.
# Setup on a GPU machine with internet:  pip install -e . -r bench/requirements-gpu.txt   (trl included)
# Usage: bash bench/perf/e2e_suite.sh      (E2E_STEPS, E2E_*_TIMEOUT in seconds, 0: no limit)
#   E2E_RUNS="ours" E2E_OURS_NAME=e2e_ours_vllm024: only ours, into results/perf/e2e_ours_vllm024.json
#   (bench/verl/suite.sh runs it so with verl's environment first on PATH)
#   E2E_OURS_OVERRIDES="key=value ...": more config overrides for ours (bench/verl/suite.sh saves a batch so)
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1
source bench/common/gpu_inputs.sh
STEPS=${E2E_STEPS:-4}
LOGS=${E2E_LOGS:-/tmp}
RUNS=" ${E2E_RUNS:-ours trl} "
OURS=${E2E_OURS_NAME:-e2e_ours}
DATA=$(gsm8k_train512)
MODEL=$(random_model qwen3-0.6b)
# Which call wrote the jsons (bench/common/suite_calls.py): the reports compare ours with TRL only within one call.
export BENCH_CALL=${BENCH_CALL:-$(date -u +%Y%m%dT%H%M%SZ)-$(hostname -s)}
CALL_START=$(mktemp) && trap 'rm -f "$CALL_START"' EXIT
if [[ $RUNS == *" ours "* ]]; then
    timeout "${E2E_OURS_TIMEOUT:-0}" python3 -m bench.common.grpo_vllm_gpu --model-dir "$MODEL" --data "$DATA" --steps "$STEPS" \
        --out "results/perf/$OURS" data.train_batch_size=32 rollout.n=8 data.max_prompt_length=384 \
        data.max_response_length=512 actor.ppo_mini_batch_size=32 actor.lr=1e-6 actor.weight_decay=0.0 \
        actor.use_kl_loss=false actor.loss_agg_mode=token-mean actor.grad_clip=1.0 \
        actor.micro_batch_tokens="${E2E_MICRO_TOKENS:-16384}" rollout.temperature=1.0 rollout.top_p=1.0 \
        rollout.gpu_memory_utilization=0.4 rollout.enforce_eager=false trainer.device=cuda ${E2E_OURS_OVERRIDES:-} \
        >"$LOGS/$OURS.log" 2>&1 && cp "results/perf/$OURS/grpo.json" "results/perf/$OURS.json" || echo "ours failed: $?"
    grep -E "^step|Error|error:" "$LOGS/$OURS.log" | tail -8
fi
if [[ $RUNS == *" trl "* ]]; then
    timeout "${E2E_TRL_TIMEOUT:-0}" python3 -m bench.perf.trl_grpo_gpu --model-dir "$MODEL" --data "$DATA" --steps "$STEPS" \
        --prompts-per-step 32 --n 8 --max-prompt-len 384 --max-response-len 512 --lr 1e-6 \
        --gpu-memory-utilization 0.4 --out results/perf/e2e_trl >"$LOGS/e2e_trl.log" 2>&1 \
        && cp results/perf/e2e_trl/trl_grpo.json results/perf/e2e_trl.json || echo "trl failed: $?"
    grep -E "^step|Error|error:" "$LOGS/e2e_trl.log" | tail -8
fi
python3 -m bench.common.suite_calls --dir results/perf --call "$BENCH_CALL" --newer "$CALL_START"
