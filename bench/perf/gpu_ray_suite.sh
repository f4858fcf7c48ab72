#!/usr/bin/env bash
# GRPO under the Ray controller with vLLM rollout and FSDP2, on 1 and then 2 GPUs of one host (the committed
# runs on 2 H200s): a random-init Qwen3-1.7B from bench/configs/qwen3-1.7b, 512 GSM8K training prompts.
# Writes results/grpo_ray_1gpu/ and results/grpo_ray_2gpu/.
# Setup on a GPU machine with internet:  pip install -e . -r bench/requirements-gpu.txt
# Usage: bash bench/perf/gpu_ray_suite.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
# NVLink multicast off, as on the hosts the committed runs used (their GPUs were shared); Ray's workers
# inherit this environment.
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1 \
    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 RAY_AUTH_MODE=disabled
source bench/common/gpu_inputs.sh
DATA=$(gsm8k_train512)
MODEL=$(random_model qwen3-1.7b)
for gpus in 1 2; do
    python3 -m bench.common.grpo_vllm_gpu --model-dir "$MODEL" --data "$DATA" --steps 4 \
        --out "results/grpo_ray_${gpus}gpu" trainer.controller=ray "trainer.n_gpus_per_node=$gpus" \
        data.train_batch_size=64 rollout.n=5 data.max_prompt_length=384 data.max_response_length=256 \
        actor.ppo_mini_batch_size=32 actor.micro_batch_size=8 actor.lr=1e-5 actor.gradient_checkpointing=true \
        reward.custom_function.path=bench/common/varied_reward.py rollout.gpu_memory_utilization=0.3
done
