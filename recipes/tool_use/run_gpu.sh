#!/usr/bin/env bash
# GRPO on GSM8K with a Python tool: the policy may run code (core.rollout.multi_turn.python_tool:python, a sandboxed
# subprocess) between its turns, in the style of verl's GSM8K tool example and ReTool. Chat-format tool calls
# (<tool_call>{"name": "python", "arguments": {"code": ...}}</tool_call>), so a model whose template speaks them:
# Qwen2.5 Instruct by default (MODEL=... for another; Qwen3 with thinking on passes the template check too).
# Hardware: 1 GPU (vLLM rollout, colocated). Another recipe: RECIPE=rloo bash <this script>.
# Data: prepare GSM8K in verl's schema first:  recipezoo data gsm8k --out $HOME/data/gsm8k  (or DATA=/path).
# Check before you launch (offline, no GPU):  bash recipes/tool_use/run_gpu.sh --dry-run
set -euo pipefail
RECIPE="${RECIPE:-grpo}"
MODEL="${MODEL:-Qwen/Qwen2.5-1.5B-Instruct}"
DATA="${DATA:-$HOME/data/gsm8k}"
case "$DATA" in /*) ;; *) DATA="$PWD/$DATA" ;; esac  # absolute before the cd below
cd "$(dirname "$0")/../.."
# Responses hold every turn and every tool reply: 1024 tokens for up to 4 turns; replies cut at 1000 characters.
# The reward reads the model's own answer (math_verify: the last \boxed{}, else the final expression): Qwen2.5 answers
# in \boxed{N}, which GSM8K's strict `#### N` scores 0 whatever the episode did with the tool.
exec python -m core.cli train --recipe "$RECIPE" \
    model.path="$MODEL" \
    data.train_files="$DATA/train.parquet" \
    data.val_files="$DATA/test.parquet" \
    data.train_batch_size=64 \
    data.val_max_samples=500 \
    data.max_prompt_length=1024 \
    data.max_response_length=1024 \
    rollout.name=vllm \
    rollout.n=8 \
    rollout.multi_turn.enable=true \
    rollout.multi_turn.tools=[core.rollout.multi_turn.python_tool:python] \
    rollout.multi_turn.format=chat \
    rollout.multi_turn.max_turns=4 \
    rollout.multi_turn.max_tool_response_chars=1000 \
    reward.gsm8k_method=math_verify \
    actor.lr=1e-6 \
    actor.ppo_mini_batch_size=16 \
    actor.micro_batch_size=16 \
    actor.gradient_checkpointing=true \
    trainer.total_steps=100 \
    trainer.test_freq=10 \
    tracking.run_name="tool-use-gsm8k-$RECIPE" \
    tracking.tags.recipe=tool_use \
    "$@"
