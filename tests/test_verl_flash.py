"""bench/verl/flash.sh, the flash-attn step of bench/verl/suite.sh, with a fake verl interpreter and a fake build
(the real ones need nvcc and a GPU): the build starts in the background only where flash-attn is missing, verl's
packing waits for it, then follows the GPU check, and --packing on refuses to run verl padded."""

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

FAKE_PY = """#!/usr/bin/env bash
if [ "$1" = -c ]; then [ -f "$FAKE/installed" ]; exit; fi
if [ "$1 $2" = "-m bench.verl.flash_attn_check" ]; then
    echo "flash-attn fake, GPU $CUDA_VISIBLE_DEVICES"
    if [ -f "$FAKE/check_ok" ]; then echo "flash_attn_check: pass"; exit 0; fi
    echo "flash_attn_check: FAIL"; exit 1
fi
exit 2
"""
FAKE_BUILD = """#!/usr/bin/env bash
case " $* " in
    *" --background "*)
        echo started >"$FAKE/started"; echo "nice $(nice) $*" >>"$FAKE/build_calls"
        (sleep 1; [ -f "$FAKE/build_ok" ] && touch "$FAKE/installed"; [ -f "$FAKE/build_ok" ] && echo 0 >"$FAKE/done" \\
            || echo 1 >"$FAKE/done") &
        exit 0 ;;
    *" --status "*)
        if [ -f "$FAKE/done" ]; then echo "done: exit $(cat "$FAKE/done")"; exit "$(cat "$FAKE/done")"; fi
        if [ -f "$FAKE/started" ]; then echo running; exit 3; fi
        echo "not started"; exit 4 ;;
esac
exit 2
"""


@pytest.fixture
def fake(tmp_path):
    (tmp_path / "python").write_text(FAKE_PY)
    (tmp_path / "build.sh").write_text(FAKE_BUILD)
    os.chmod(tmp_path / "python", 0o755)
    return tmp_path


def run(fake: Path, packing: str, *, wheels: bool = True, head_dim: str = "128") -> subprocess.CompletedProcess:
    env = {**os.environ, "FAKE": str(fake), "VERL_PY": str(fake / "python"), "PACKING": packing,
           "WHEELS": str(fake / "wheels") if wheels else "", "FLASH_HEAD_DIM": head_dim, "CHECK_GPU": "3",
           "CHECK_OUT": str(fake / "check.txt"), "FLASH_BUILD": str(fake / "build.sh"), "FLASH_POLL_S": "1"}
    script = "set -uo pipefail; source bench/verl/flash.sh; flash_build_start; verl_packing"
    return subprocess.run(["bash", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)


def test_a_missing_flash_attn_is_built_in_the_background_then_checked_before_verl_packs(fake):
    (fake / "build_ok").touch()
    (fake / "check_ok").touch()
    result = run(fake, "auto")
    assert result.returncode == 0 and result.stdout.strip() == "on", result.stderr
    call = (fake / "build_calls").read_text()
    assert call.startswith("nice 19 ") and "--head-dim 128 --background" in call  # beside the measured columns
    assert (fake / "check.txt").read_text() == "flash-attn fake, GPU 3\nflash_attn_check: pass\n"


def test_an_installed_flash_attn_is_not_rebuilt(fake):
    (fake / "installed").touch()
    (fake / "check_ok").touch()
    (fake / "check.txt").write_text("an earlier call's verdict\n")
    result = run(fake, "auto")
    assert result.stdout.strip() == "on" and "not started" not in result.stderr
    assert not (fake / "build_calls").exists()
    assert "earlier" not in (fake / "check.txt").read_text()


def test_a_failed_check_runs_verl_padded_under_auto_and_not_at_all_under_on(fake):
    (fake / "installed").touch()  # installed, but computes garbage on this GPU
    result = run(fake, "auto")
    assert result.returncode == 0 and result.stdout.strip() == "off"
    assert "verl runs padded" in result.stderr
    assert (fake / "check.txt").read_text().endswith("flash_attn_check: FAIL\n")
    result = run(fake, "on")
    assert result.returncode == 1 and result.stdout.strip() == "" and "verl not run" in result.stderr


def test_a_failed_build_leaves_verl_padded(fake):
    result = run(fake, "auto")  # no build_ok: the build ends with exit 1 and installs nothing
    assert result.returncode == 0 and result.stdout.strip() == "off"
    assert "done: exit 1" in result.stderr and not (fake / "check.txt").exists()


def test_packing_off_starts_no_build_and_no_check(fake):
    result = run(fake, "off")
    assert result.stdout.strip() == "off"
    assert not (fake / "build_calls").exists() and not (fake / "check.txt").exists()
    assert run(fake, "auto", wheels=False).stdout.strip() == "off"  # no wheel dir: nothing is built
    assert not (fake / "build_calls").exists()
