#!/usr/bin/env bash
# The vLLM-backend GPU runs (issue: real rollout engines), in one device call after the bundle is unpacked:
#   1. a random-init Qwen3-0.6B from its config (the tokenizer travels as .device-bundle/qwen3/),
#   2. rollout tokens/s: our backend vs raw vllm.LLM.generate, one engine, same prompts; sleep measured,
#   3. GRPO, vLLM rollout + FSDP2 update colocated on the GPU, a few steps.
# Writes results/rollout_vllm/ and results/grpo_vllm_gpu/ (and copies them to $OUT when set).
# Usage (device): sh .device-bundle/vllm-rl/c02/stage.sh --unpack && bash bench/gpu_vllm_suite.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}" VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
MODEL=/tmp/qwen3-0.6b-random
python3 bench/random_model.py --config-dir .device-bundle/qwen3 --out "$MODEL"
python3 bench/rollout_vllm_gpu.py --model-dir "$MODEL" --prompts 256 --prompt-len 128 --new-tokens 256 --rounds 6 \
    --out results/rollout_vllm
python3 bench/grpo_vllm_gpu.py --model-dir "$MODEL" --data .device-bundle/qwen3/gsm8k_train512.parquet --steps 5 \
    --out results/grpo_vllm_gpu data.train_batch_size=64 rollout.n=5 data.max_prompt_length=384 \
    data.max_response_length=256 actor.ppo_mini_batch_size=32 actor.micro_batch_size=16 actor.lr=1e-5 \
    reward.custom_function.path=bench/varied_reward.py \
    rollout.gpu_memory_utilization=0.35 actor.gradient_checkpointing=true
if [ -n "${OUT:-}" ]; then
    mkdir -p "$OUT/rollout_vllm" "$OUT/grpo_vllm_gpu"
    cp results/rollout_vllm/* "$OUT/rollout_vllm/"
    cp results/grpo_vllm_gpu/* "$OUT/grpo_vllm_gpu/"
fi
