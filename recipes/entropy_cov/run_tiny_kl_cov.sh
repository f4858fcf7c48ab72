#!/usr/bin/env bash
# KL-Cov (recipes/entropy_cov/kl_cov.yaml) on the embedded tiny Qwen3 + arithmetic task: 2 CPU cores, no GPU.
# Extra arguments are config overrides, e.g.: bash recipes/entropy_cov/run_tiny_kl_cov.sh trainer.total_steps=20
set -euo pipefail
cd "$(dirname "$0")/../.."
exec python -m core.cli train --recipe recipes/entropy_cov/kl_cov.yaml "$@"
