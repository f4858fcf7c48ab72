# flash-attn for verl's column of bench/verl/suite.sh (sourced, not run): its build goes on in the background
# while ours' columns run, and verl's first launch waits for it and for the GPU check.
#   flash_build_start   start bench/verl/build_flash_attn.sh --background into WHEELS where verl's env lacks flash-attn
#   verl_packing        on or off (stdout): what verl runs with, after the build ends and bench/verl/flash_attn_check.py
#                       has passed on this GPU; fails (exit 1) with --packing on when it cannot be on
# Reads: VERL_PY, PACKING (auto, on, off), WHEELS (may be empty: no build), FLASH_HEAD_DIM (may be empty: every
# head dim), CHECK_GPU (the GPU the check runs on), CHECK_OUT (where the check's output is kept, may be empty);
# FLASH_BUILD (default bench/verl/build_flash_attn.sh) and FLASH_POLL_S (default 15) for tests.

flash_installed() { "$VERL_PY" -c "import flash_attn_2_cuda" 2>/dev/null; }

flash_build_start() {
    if [ "$PACKING" = off ] || [ -z "$WHEELS" ] || flash_installed; then return 0; fi
    # At nice 19: the columns measured beside it keep their cores (vLLM's decode loop is CPU-bound at small models).
    nice -n 19 bash "${FLASH_BUILD:-bench/verl/build_flash_attn.sh}" --python "$VERL_PY" --wheel-dir "$WHEELS" \
        ${FLASH_HEAD_DIM:+--head-dim "$FLASH_HEAD_DIM"} --background >&2
}

flash_build_wait() {  # until a build started here ends; its status on stderr (none where no build started)
    [ -n "$WHEELS" ] || return 0
    local waited=0 status rc
    while true; do
        status=$(bash "${FLASH_BUILD:-bench/verl/build_flash_attn.sh}" --wheel-dir "$WHEELS" --status 2>&1); rc=$?
        [ "$rc" -eq 3 ] || break  # 3: running; 4: never started; else the build's exit code
        [ $(( waited % 300 )) -eq 0 ] && echo "== waiting for the flash-attn build (${waited} s so far)" >&2
        sleep "${FLASH_POLL_S:-15}"; waited=$(( waited + ${FLASH_POLL_S:-15} ))
    done
    [ "$rc" -eq 4 ] || echo "$status" >&2
}

flash_check() {  # bench/verl/flash_attn_check.py on CHECK_GPU, its output kept in CHECK_OUT where given
    local check=(env CUDA_VISIBLE_DEVICES="${CHECK_GPU:-0}" "$VERL_PY" -m bench.verl.flash_attn_check)
    if [ -z "${CHECK_OUT:-}" ]; then "${check[@]}" >&2; return; fi
    "${check[@]}" 2>&1 | tee "$CHECK_OUT" >&2
    return "${PIPESTATUS[0]}"
}

verl_packing() {
    [ "$PACKING" = off ] && { echo off; return 0; }
    [ -n "${CHECK_OUT:-}" ] && rm -f "$CHECK_OUT"  # an earlier call's verdict is not this one's
    flash_build_wait
    if flash_installed && flash_check; then echo on; return 0; fi
    if [ "$PACKING" = on ]; then
        echo "== --packing on, but flash-attn is missing or failed its check: verl not run" >&2
        return 1
    fi
    echo "== flash-attn missing or failed its check: verl runs padded (not at its best)" >&2
    echo off
}
