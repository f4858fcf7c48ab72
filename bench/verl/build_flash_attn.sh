#!/usr/bin/env bash
# flash-attn 2.8.x for verl's environment (torch 2.11, CUDA 13, Python 3.12), built from PyPI's source for
# Hopper (sm_90) only, or a wheel already built for that torch/CUDA/Python installed instead. verl packs
# sequences (use_remove_padding=True) only with flash-attn, and PyPI has it as source only.
#
#   bash bench/verl/build_flash_attn.sh --python ~/envs/verl/bin/python --wheel-dir ~/wheels          # foreground
#   bash bench/verl/build_flash_attn.sh --python ~/envs/verl/bin/python --wheel-dir ~/wheels --background
#   bash bench/verl/build_flash_attn.sh --wheel-dir ~/wheels --status      # running / done (exit code) / not started
#   ~/envs/verl/bin/python -m bench.verl.flash_attn_check                  # then: varlen == SDPA on the GPU
#
# Needs: nvcc of CUDA 13 (CUDA_HOME, or nvcc on PATH), the target env with torch, ninja, psutil, packaging
# and einops (bench/requirements-verl.txt has them all), internet for the sdist unless --sdist FILE is given.
# A wheel in --wheel-dir whose name matches the env (flash_attn-2.8*+cu13*torch2.11*-cp312-cp312-linux_x86_64)
# is installed without building; the build leaves its wheel there, so the next environment skips the build.
# Only sm_90 (FLASH_ATTN_CUDA_ARCHS=90: the setup.py default also builds 80, 100 and 120) cuts the build to a
# quarter of the kernels (72 kernel files remain, minutes of nvcc each); not timed end to end yet.
# --head-dim D builds only the 6 bf16 kernel files of head dim D (bench/verl/flash_attn_prune.py; Qwen3 and Llama: 128)
# of the 72: the wheel (local version ...sm90hdimDbf16) then refuses fp16 and other head dims with an error. Even
# so, the build of the 6 took 396 s from its start to its done-marker on 16 cores of an H200 host (MAX_JOBS=8,
# NVCC_THREADS=2; timed from outside, before the log gave its own seconds): start it with --background. The log's
# last line gives the build's exit code and seconds.
# Options: --version 2.8.3 (FLASH_ATTN_VERSION), --jobs N (MAX_JOBS; default cores / NVCC_THREADS, at most
# one per 6 GB of free memory), NVCC_THREADS (default 2), --log FILE (default WHEEL_DIR/build_flash_attn.log).
set -uo pipefail
SELF=$(realpath "$0")
PY=python3 WHEEL_DIR="" SDIST="" MODE=run JOBS=${MAX_JOBS:-} LOG="" HEAD_DIM=""
VERSION=${FLASH_ATTN_VERSION:-2.8.3}
while [ $# -gt 0 ]; do
    case "$1" in
        --python) PY=$2; shift 2 ;;
        --wheel-dir) WHEEL_DIR=$2; shift 2 ;;
        --sdist) SDIST=$2; shift 2 ;;
        --version) VERSION=$2; shift 2 ;;
        --jobs) JOBS=$2; shift 2 ;;
        --log) LOG=$2; shift 2 ;;
        --head-dim) HEAD_DIM=$2; shift 2 ;;
        --background) MODE=background; shift ;;
        --status) MODE=status; shift ;;
        *) echo "build_flash_attn.sh: unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
    esac
done
[ -n "$WHEEL_DIR" ] || { echo "build_flash_attn.sh: --wheel-dir DIR is required" >&2; exit 2; }
mkdir -p "$WHEEL_DIR" && WHEEL_DIR=$(cd "$WHEEL_DIR" && pwd)
LOG=${LOG:-$WHEEL_DIR/build_flash_attn.log}
DONE=$WHEEL_DIR/build_flash_attn.done  # holds the exit code once a run ended; absent while it runs
PIDFILE=$WHEEL_DIR/build_flash_attn.pid

status() {  # one line (and the log's end while it runs): what a caller polling a background build needs
    if [ -f "$DONE" ]; then
        echo "done: exit $(cat "$DONE"); wheels: $(cd "$WHEEL_DIR" && ls flash_attn-*.whl 2>/dev/null | tr '\n' ' ')"
        return "$(cat "$DONE")"
    elif [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
        echo "running (pid $(cat "$PIDFILE")); $(grep -c '^\[' "$LOG" 2>/dev/null) ninja steps so far"
        tail -n 3 "$LOG"
        return 3
    fi
    echo "not started (or killed): no $DONE"
    return 4
}

env_tags() {  # "cp312 2.11 13": the env's Python tag, torch major.minor, torch's CUDA major
    "$PY" -c 'import sys, torch
print(f"cp{sys.version_info.major}{sys.version_info.minor}", ".".join(torch.__version__.split("+")[0].split(".")[:2]),
      (torch.version.cuda or "none").split(".")[0])'
}

matching_wheel() {  # a flash-attn 2.8 wheel for this env, as named by our build or by the usual prebuilt ones;
    # a pruned one (hdimD) only where --head-dim D asks for it, and then a full one serves too
    local py=$1 torch=$2 cuda=$3
    (cd "$WHEEL_DIR" && ls flash_attn-2.8*.whl 2>/dev/null) | grep -E \
        "^flash_attn-2\.8[^+]*\+cu${cuda}[0-9]*torch${torch//./\\.}([^0-9].*)?-${py}-${py}-linux_x86_64\.whl$" \
        | grep -v cxx11abiFALSE | awk -v want="${HEAD_DIM:+hdim${HEAD_DIM}bf16}" \
            '!/hdim[0-9]+bf16/ || (want != "" && index($0, want "-"))' \
        | sort -V | tail -n 1  # torch 2.11's wheels use the C++11 ABI
}

fetch_sdist() {  # PyPI's source archive, checked against the sha256 PyPI lists for it
    local url sha
    read -r url sha < <("$PY" - "$VERSION" <<'PY'
import json, sys, urllib.request
files = json.load(urllib.request.urlopen(f"https://pypi.org/pypi/flash-attn/{sys.argv[1]}/json"))["urls"]
sdist = next(f for f in files if f["packagetype"] == "sdist")
print(sdist["url"], sdist["digests"]["sha256"])
PY
) || return 1
    SDIST=$WHEEL_DIR/$(basename "$url")
    [ -f "$SDIST" ] || curl -fsSL -o "$SDIST" "$url" || return 1
    echo "$sha  $SDIST" | sha256sum -c --quiet || { rm -f "$SDIST"; echo "sha256 mismatch: $SDIST" >&2; return 1; }
}

build() {
    read -r py torch cuda < <(env_tags) || { echo "no torch in $PY" >&2; return 1; }
    local wheel
    wheel=$(matching_wheel "$py" "$torch" "$cuda")
    if [ -z "$wheel" ]; then
        command -v "${CUDA_HOME:+$CUDA_HOME/bin/}nvcc" >/dev/null \
            || { echo "no nvcc (set CUDA_HOME) and no wheel for $py torch $torch CUDA $cuda in $WHEEL_DIR" >&2; return 1; }
        [ -n "$SDIST" ] || fetch_sdist || { echo "could not fetch flash-attn $VERSION's sdist from PyPI" >&2; return 1; }
        local threads=${NVCC_THREADS:-2} free_gb
        free_gb=$(awk '/MemAvailable/ {print int($2 / 1048576)}' /proc/meminfo)
        local jobs=${JOBS:-$(( $(nproc) / threads ))}
        jobs=$(( jobs > free_gb / 6 ? free_gb / 6 : jobs )); jobs=$(( jobs < 1 ? 1 : jobs ))
        echo "building $(basename "$SDIST") for sm_90: MAX_JOBS=$jobs NVCC_THREADS=$threads ($(nproc) cores, ${free_gb} GB free)"
        # FORCE_BUILD: setup.py would first try to download a prebuilt wheel from GitHub; LOCAL_VERSION names the
        # wheel so that matching_wheel finds it for the next environment; -v puts ninja's [k/n] lines in the log,
        # which --status counts.
        local source=$SDIST
        if [ -n "$HEAD_DIM" ]; then  # an unpacked, pruned copy of the sdist
            source=$WHEEL_DIR/src-hdim$HEAD_DIM && rm -rf "$source" && mkdir -p "$source" || return 1
            tar xzf "$SDIST" -C "$source" --strip-components 1 || return 1
            "$PY" "$(dirname "$SELF")/flash_attn_prune.py" "$source" --head-dim "$HEAD_DIM" || return 1
        fi
        FLASH_ATTN_CUDA_ARCHS=90 FLASH_ATTENTION_FORCE_BUILD=TRUE MAX_JOBS=$jobs NVCC_THREADS=$threads \
            FLASH_ATTN_LOCAL_VERSION="cu${cuda}0torch${torch}sm90${HEAD_DIM:+hdim${HEAD_DIM}bf16}" \
            "$PY" -m pip wheel -v --no-build-isolation --no-deps -w "$WHEEL_DIR" "$source" || return 1
        wheel=$(matching_wheel "$py" "$torch" "$cuda")
        [ -n "$wheel" ] || { echo "the build left no matching wheel in $WHEEL_DIR" >&2; return 1; }
    fi
    echo "installing $wheel"
    "$PY" -m pip install --no-deps --force-reinstall "$WHEEL_DIR/$wheel" || return 1
    "$PY" -c 'import flash_attn, flash_attn_2_cuda; print("flash_attn", flash_attn.__version__, "imports")'
}

case $MODE in
    status) status; exit ;;
    background)
        if [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then  # two builds would share log and marker
            echo "a build is already running (pid $(cat "$PIDFILE")): poll it with --status" >&2; exit 1
        fi
        rm -f "$DONE"
        nohup bash -c "bash '$SELF' --python '$PY' --wheel-dir '$WHEEL_DIR' --version '$VERSION' --log '$LOG' \
            ${SDIST:+--sdist '$SDIST'} ${JOBS:+--jobs '$JOBS'} ${HEAD_DIM:+--head-dim '$HEAD_DIM'}" >/dev/null 2>&1 &
        echo $! >"$PIDFILE"
        echo "started (pid $!): log $LOG; poll with: bash $SELF --wheel-dir $WHEEL_DIR --status"
        exit 0 ;;
esac
rm -f "$DONE"
build >"$LOG" 2>&1
rc=$?
echo "build_flash_attn: exit $rc after $SECONDS s" >>"$LOG"
echo "$rc" >"$DONE"
tail -n 5 "$LOG"
exit "$rc"
