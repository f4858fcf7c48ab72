"""bench/leaderboard/host.py: host memory readings, and a leaderboard job killed by SIGKILL from outside the driver
named as such, with real processes (one kills itself with SIGKILL, one the driver stops)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from bench.leaderboard import (
    job_runner,  # noqa: E402
)
from bench.leaderboard.host import HostMemory, read_meminfo  # noqa: E402


def meminfo(path: Path, available_kib: int, total_kib: int = 256 * 2**20) -> Path:
    path.write_text(f"MemTotal:       {total_kib} kB\nMemFree:          1000 kB\n"
                    f"MemAvailable:   {available_kib} kB\nBuffers:          10 kB\n")
    return path


def test_readings_in_gib_and_the_lowest_kept(tmp_path):
    file = meminfo(tmp_path / "meminfo", 100 * 2**20)
    assert read_meminfo(file) == (100.0, 256.0)
    assert read_meminfo(tmp_path / "absent") is None
    host = HostMemory(file)
    assert host.text() == "" and host.killed_reason(-9, False).endswith("memory)")  # no reading: nothing invented
    host.sample()
    meminfo(file, 3 * 2**19)  # 1.5 GiB
    host.sample()
    meminfo(file, 50 * 2**20)
    host.sample()
    assert host.text() == "host memory free 50 of 256 GiB" and host.lowest == 1.5


def test_only_a_sigkill_the_driver_did_not_send_is_called_one(tmp_path):
    host = HostMemory(meminfo(tmp_path / "meminfo", 2**20))
    host.sample()
    reason = host.killed_reason(-9, stopped_by_driver=False)
    assert "SIGKILL from outside the driver" in reason and "fell to 1.0 of 256 GiB" in reason
    assert host.killed_reason(-9, stopped_by_driver=True) is None
    assert host.killed_reason(1, stopped_by_driver=False) is None and host.killed_reason(0, False) is None


def _job(tmp_path: Path, name: str, code: str) -> job_runner.Job:
    log = tmp_path / "logs" / f"{name}.log"
    log.parent.mkdir(exist_ok=True)
    log.write_text("step 1/40\n")
    job = job_runner.Job(name, None, 0, log=log, gpu="0")  # the pretrained evaluation: no GPU time to tag
    job.process, job.started = subprocess.Popen([sys.executable, "-c", code]), time.time()
    job.process.wait()
    return job


def test_a_job_killed_from_outside_is_reported_so_and_one_the_driver_stopped_is_not(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(job_runner, "discard_before_evals", lambda *args: None)  # no store in this test
    host = HostMemory(meminfo(tmp_path / "meminfo", 4 * 2**20))
    host.sample()
    killed = _job(tmp_path, "pretrained", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    job_runner.finish_job(killed, [killed], tmp_path, "file:///store", {}, "exp", host)
    assert killed.status == "crashed" and "SIGKILL from outside the driver" in killed.error
    assert "fell to 4.0 of 256 GiB" in capsys.readouterr().out
    stopped = _job(tmp_path, "pretrained", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    stopped.killed_by_driver = True
    job_runner.finish_job(stopped, [stopped], tmp_path, "file:///store", {}, "exp", host)
    assert stopped.status == "crashed" and stopped.error == "stopped past the time limit at step 1/40"
    failed = _job(tmp_path, "pretrained", "raise SystemExit(3)")
    job_runner.finish_job(failed, [failed], tmp_path, "file:///store", {}, "exp", host)
    assert failed.error is None and "SIGKILL" not in capsys.readouterr().out
    # An exception in its log is the record's reason, read now: a rerun in the same --out rewrites the log.
    halted = _job(tmp_path, "pretrained", "raise SystemExit(1)")
    halted.log.write_text("step 1/40\n[rank0]: core.trainer.stops.RunHalted: stopped at step 1: the reward failed\n")
    job_runner.finish_job(halted, [halted], tmp_path, "file:///store", {}, "exp", host)
    assert halted.error == "core.trainer.stops.RunHalted: stopped at step 1: the reward failed"
