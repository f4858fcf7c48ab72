"""bench/common/detached.sh: how the long GPU suites (bench/verl/suite.sh, bench/perf/side_by_side.sh,
bench/perf/drift_suite.sh) start themselves detached and are polled, run here on a script that sleeps."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def bash(command: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", f"source {REPO}/bench/common/detached.sh && {command}"], cwd=cwd,
                          capture_output=True, text=True, timeout=60)


def test_a_detached_run_is_running_then_done_with_its_exit_code_and_a_second_start_is_refused(tmp_path):
    script = tmp_path / "work.sh"
    script.write_text('echo "working on $1"; sleep 2; exit 3\n')
    assert bash("detached_state . job", tmp_path).stdout.startswith("not started")
    started = bash(f"detached_start . job 'poll me' {script} 'an arg'", tmp_path)
    assert started.returncode == 0 and "poll with: poll me" in started.stdout
    assert bash("detached_state . job", tmp_path).stdout.startswith("running")
    again = bash(f"detached_start . job 'poll me' {script}", tmp_path)
    assert again.returncode == 1 and "already running" in again.stderr
    deadline = time.time() + 30
    while not (tmp_path / "job.done").is_file() and time.time() < deadline:
        time.sleep(0.2)
    assert bash("detached_state . job", tmp_path).stdout.strip() == "done: exit 3"
    assert (tmp_path / "job.log").read_text() == "working on an arg\n"
