#!/usr/bin/env bash
# Tool-using GRPO on the embedded tiny model and calculator task. Runs anywhere: 2 CPU cores, no GPU, no download.
# The first run also warm-starts the tiny tool model (cached in ~/.cache/recipezoo).
# Another algorithm: bash recipes/tool_use/run_tiny.sh --recipe rloo (its config, plus this recipe's tool-use keys).
# Extra arguments are config overrides, e.g.: bash recipes/tool_use/run_tiny.sh trainer.total_steps=10
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ "${1:-}" = "--recipe" ]; then
  recipe=$2
  shift 2
  mapfile -t tool_use < <(python -m recipes.tool_use.overrides)
  exec python -m core.cli train --recipe "$recipe" "${tool_use[@]}" "$@"
fi
exec python -m core.cli train --recipe tool_use "$@"
