#!/usr/bin/env bash
# The vLLM-backend runs on one GPU (80 GB; the committed ones on an H100):
#   1. a random-init Qwen3-0.6B from bench/configs/qwen3-0.6b,
#   2. rollout tokens/s: our backend vs raw vllm.LLM.generate, one engine, same prompts; sleep measured,
#   3. GRPO, vLLM rollout + FSDP2 update colocated on the GPU, 5 steps on 512 GSM8K training prompts.
# Writes results/rollout_vllm/ and results/grpo_vllm_gpu/.
# Setup on a GPU machine with internet:  pip install -e . -r bench/requirements-gpu.txt
# Usage: bash bench/perf/gpu_vllm_suite.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1
source bench/common/gpu_inputs.sh
DATA=$(gsm8k_train512)
MODEL=$(random_model qwen3-0.6b)
python3 -m bench.perf.rollout_vllm_gpu --model-dir "$MODEL" --prompts 256 --prompt-len 128 --new-tokens 256 --rounds 6 \
    --out results/rollout_vllm
python3 -m bench.common.grpo_vllm_gpu --model-dir "$MODEL" --data "$DATA" --steps 5 \
    --out results/grpo_vllm_gpu data.train_batch_size=64 rollout.n=5 data.max_prompt_length=384 \
    data.max_response_length=256 actor.ppo_mini_batch_size=32 actor.micro_batch_size=16 actor.lr=1e-5 \
    reward.custom_function.path=bench/common/varied_reward.py \
    rollout.gpu_memory_utilization=0.35 actor.gradient_checkpointing=true
