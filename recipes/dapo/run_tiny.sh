#!/usr/bin/env bash
# DAPO on the embedded tiny Qwen3 + arithmetic task. Runs anywhere: 2 CPU cores, no GPU, no download.
# The first run also builds and SFT-warm-starts the tiny model (cached in ~/.cache/recipezoo).
# Extra arguments are config overrides, e.g.: bash recipes/dapo/run_tiny.sh trainer.total_steps=20
set -euo pipefail
cd "$(dirname "$0")/../.."
exec python -m core.cli train --recipe dapo "$@"
