#!/usr/bin/env bash
# GSPO (recipes/grpo/gspo.yaml) on the embedded tiny Qwen3 + arithmetic task: 2 CPU cores, no GPU.
# Extra arguments are config overrides, e.g.: bash recipes/grpo/run_tiny_gspo.sh trainer.total_steps=20
set -euo pipefail
cd "$(dirname "$0")/../.."
exec python -m core.cli train --recipe recipes/grpo/gspo.yaml "$@"
