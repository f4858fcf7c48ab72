#!/usr/bin/env bash
# Clip-Cov on the embedded tiny Qwen3 + arithmetic task. Runs anywhere: 2 CPU cores, no GPU, no download.
# Extra arguments are config overrides, e.g.: bash recipes/entropy_cov/run_tiny.sh trainer.total_steps=20
set -euo pipefail
cd "$(dirname "$0")/../.."
exec python -m core.cli train --recipe entropy_cov "$@"
