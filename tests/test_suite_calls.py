"""bench/common/suite_calls.py: which suite call wrote each result file, and the one-line errors of its command."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from bench.common.suite_calls import calls, record, same_call, separation  # noqa: E402


def run(*args, cwd):
    # From another folder: the repo root on PYTHONPATH, as the suites run it from the root.
    return subprocess.run([sys.executable, "-m", "bench.common.suite_calls", *args], cwd=cwd,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True)


def test_files_of_one_call_compare_and_a_file_without_an_entry_is_from_another(tmp_path):
    for name in ("a.json", "b.json", "c.json"):
        (tmp_path / name).write_text("{}")
    assert same_call(tmp_path, "a.json", "b.json") is None  # nothing recorded: the report falls back to devices
    record(tmp_path, "call-1", ["a.json", "b.json"])
    assert same_call(tmp_path, "a.json", "b.json") is True
    assert same_call(tmp_path, "a.json", "c.json") is False
    record(tmp_path, "call-2", ["b.json"])  # a later call re-ran b only
    assert same_call(tmp_path, "a.json", "b.json") is False
    assert calls(tmp_path) == {"a.json": "call-1", "b.json": "call-2"}


def test_newer_records_only_the_jsons_written_after_the_marker(tmp_path):
    (tmp_path / "old.json").write_text("{}")
    marker = tmp_path / "start"
    marker.write_text("")
    os.utime(tmp_path / "old.json", (1, 1))
    os.utime(marker, (100, 100))
    (tmp_path / "new.json").write_text("{}")
    result = run("--dir", str(tmp_path), "--call", "c9", "--newer", str(marker), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "calls.json").read_text()) == {"new.json": "c9"}


def test_bad_input_is_one_line_and_writes_nothing(tmp_path):
    result = run("--dir", str(tmp_path), "--call", "c1", "missing.json", cwd=tmp_path)
    assert result.returncode == 2 and "no such result file" in result.stderr and "missing.json" in result.stderr
    result = run("--dir", str(tmp_path), "--call", "c1", "--newer", str(tmp_path / "nope"), cwd=tmp_path)
    assert result.returncode == 2 and "--newer" in result.stderr and "marker" in result.stderr
    result = run("--dir", str(tmp_path), "--call", " ", cwd=tmp_path)
    assert result.returncode == 2 and "--call" in result.stderr
    assert not (tmp_path / "calls.json").exists()


def test_separation_says_why_two_files_cannot_be_compared(tmp_path):
    for name in ("a.json", "b.json"):
        (tmp_path / name).write_text("{}")
    files = ("a.json", "b.json")
    assert separation(tmp_path, files, ("H200", "H200")) is None
    assert separation(tmp_path, files, ("H200", "H100")) == "device"
    assert separation(tmp_path, files, ("H200", "?")) is None  # a run that did not record its device is kept
    record(tmp_path, "call-1", ["a.json"])
    assert separation(tmp_path, files, ("H200", "H200")) == "call"
    record(tmp_path, "call-1", ["b.json"])
    assert separation(tmp_path, files, ("H200", "H200")) is None
