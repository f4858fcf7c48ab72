#!/usr/bin/env bash
# The GSM8K tool recipe on one GPU beside single-turn GRPO on the same model, prompts and budget, for
# results/tool_use/gpu: step time and its stages, turns per episode, tool time per step, rollout/logprob_diff.
#     bash bench/tool_use/gpu.sh MODEL [vllm|sglang ...]        # MODEL: HF id, dir or pypi:// name
# vLLM and SGLang live in separate environments (bench/requirements-gpu.txt, bench/requirements-sglang.txt): run the
# script once from each, naming its engine.
# Each run writes RESULTS/<engine>_<tool|single>/grpo.json after every step (bench/common/grpo_vllm_gpu.py), so a run stopped by
# its time limit keeps the steps it made; then `python -m bench.tool_use.report` writes results/tool_use/gpu/README.md.
# The tool runs use tag actions (<python>code</python>, a turn ended by the stop string </python>): the small models
# this suite runs on write no hermes <tool_call> JSON before training (recipes/tool_use/README.md says how it was
# checked: bench/tool_use/format_probe.py); FORMAT=chat runs the chat-template calls instead, for a model that speaks them.
# Environment: STEPS (12), RUNS ("tool single": which runs; single_tags is single-turn on the tool run's prompts), RUN_TIMEOUT_S per run (280: then SIGTERM to the
# trainer alone, which stops after the step in flight, and a kill 60 s later), RESULTS (results/tool_use/gpu),
# WORK (/tmp/tool_use_gpu), GSM8K_LOCAL (a folder with GSM8K's train.jsonl, instead of the Hub), FORMAT (tags),
# LR (5e-6), OVERRIDES (more config overrides for every run, space-separated).
set -euo pipefail
cd "$(dirname "$0")/../.."
model=${1:?usage: bash bench/tool_use/gpu.sh MODEL [vllm|sglang ...]}
shift
engines=("${@:-vllm}")
work=${WORK:-/tmp/tool_use_gpu} out=${RESULTS:-results/tool_use/gpu} format=${FORMAT:-tags}
tags_instruction=$(python3 -c 'from core.rollout.multi_turn.python_tool import TAGS_INSTRUCTION as t; print(t)')

gsm8k_train() {  # $1: folder, $2: the instruction ('' for verl's default)
    [ -f "$1/train.parquet" ] || python3 -m core.cli data gsm8k --split train --out "$1" \
        ${GSM8K_LOCAL:+--local "$GSM8K_LOCAL/train.jsonl"} ${2:+--instruction "$2"} >&2
    echo "$1/train.parquet"
}
single_data=$(gsm8k_train "$work/gsm8k" "")
tool_data=$single_data
[ "$format" != tags ] || tool_data=$(gsm8k_train "$work/gsm8k_tags" "$tags_instruction")

# The budget both runs share: 32 prompts x 8 episodes a step, responses (every turn and tool reply) <= 768 tokens.
# The reward both runs share reads the model's own answer (math_verify: the last \boxed{}, else the final expression):
# under GSM8K's strict `#### N` a model that answers \boxed{N} scores 0 whatever it does with the tool.
common=(reward.gsm8k_method=math_verify
        data.train_batch_size=32 rollout.n=8 data.max_prompt_length=512 data.max_response_length=768
        actor.ppo_mini_batch_size=16 actor.micro_batch_size=16 "actor.lr=${LR:-5e-6}" actor.gradient_checkpointing=true
        rollout.gpu_memory_utilization=0.5)
tools=(rollout.multi_turn.enable=true "rollout.multi_turn.tools=[core.rollout.multi_turn.python_tool:python]"
       "rollout.multi_turn.format=$format" rollout.multi_turn.max_turns=4 rollout.multi_turn.max_tool_response_chars=1000)

run() {  # $1: name, $2: data, then overrides; a failed or stopped run does not stop the others
    echo "== $1 ($(date -u +%T))" >&2
    # --foreground: the signal goes to the trainer alone; sent to its process group it would also stop the engine's
    # own processes, which the step in flight still needs.
    timeout --foreground -k 60 "${RUN_TIMEOUT_S:-280}" python3 -m bench.common.grpo_vllm_gpu --model-dir "$model" --data "$2" \
        --steps "${STEPS:-12}" --out "$out/$1" "${common[@]}" "${@:3}" ${OVERRIDES:-} >"$work/$1.log" 2>&1 \
        || echo "== $1 stopped with status $? (log: $work/$1.log)" >&2
    tail -n 3 "$work/$1.log" >&2
}
mkdir -p "$work"
for engine in "${engines[@]}"; do
    for kind in ${RUNS:-tool single}; do
        case $kind in
            tool) run "${engine}_tool" "$tool_data" "rollout.name=$engine" "${tools[@]}" ;;
            single) run "${engine}_single" "$single_data" "rollout.name=$engine" ;;
            # Single-turn on the tool run's prompts: the same token mix without tools, so the tool run's first
            # turn can be compared with a run that rebuilds no context at all.
            single_tags) run "${engine}_single_tags" "$tool_data" "rollout.name=$engine" ;;
            *) echo "RUNS: unknown run $kind (expected tool, single, single_tags)" >&2; exit 2 ;;
        esac
    done
done
