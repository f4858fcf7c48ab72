#!/usr/bin/env bash
# GRPO under the Ray controller with vLLM rollout and FSDP2, on 1 and then 2 GPUs of one host (a random-init
# Qwen3-1.7B from its config; .device-bundle/qwen3-1.7b/ and .device-bundle/qwen3/ travel with the call).
# Writes results/grpo_ray_1gpu/ and results/grpo_ray_2gpu/ (copied to $OUT when set).
# Usage (device, nvidia-h200-x2): sh .device-bundle/vllm-rl/c02/stage.sh --unpack && bash bench/gpu_ray_suite.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# NVLink multicast stays off on the lent machines; Ray's workers inherit this environment.
export PYTHONPATH="/tmp/site:$PWD" VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 \
    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 RAY_AUTH_MODE=disabled
MODEL=/tmp/qwen3-1.7b-random
python3 bench/random_model.py --config-dir .device-bundle/qwen3-1.7b --out "$MODEL"
for gpus in 1 2; do
    python3 bench/grpo_vllm_gpu.py --model-dir "$MODEL" --data .device-bundle/qwen3/gsm8k_train512.parquet --steps 4 \
        --out "results/grpo_ray_${gpus}gpu" trainer.controller=ray "trainer.n_gpus_per_node=$gpus" \
        data.train_batch_size=64 rollout.n=5 data.max_prompt_length=384 data.max_response_length=256 \
        actor.ppo_mini_batch_size=32 actor.micro_batch_size=8 actor.lr=1e-5 actor.gradient_checkpointing=true \
        reward.custom_function.path=bench/varied_reward.py rollout.gpu_memory_utilization=0.3
    if [ -n "${OUT:-}" ]; then mkdir -p "$OUT/grpo_ray_${gpus}gpu" && cp results/grpo_ray_${gpus}gpu/* "$OUT/grpo_ray_${gpus}gpu/"; fi
done
