"""The driver's reading of nvidia-smi (every compute process on a GPU counts, whoever started it) and each run's
share of its GPU's time."""

import dataclasses
import os
import stat

import pytest

from bench.leaderboard.gpus import compute_process_counts, fair_share, note_gpu_processes
from bench.leaderboard.job_runner import Job

# What `nvidia-smi --query-gpu=uuid,index` and `--query-compute-apps=gpu_uuid,pid` print (csv,noheader) on a host
# where GPU 0 runs two of the driver's jobs and someone else's process, and GPU 1 one process.
FAKE_NVIDIA_SMI = """#!/bin/sh
case "$1" in
  --query-gpu=uuid,index) printf 'GPU-aaa, 0\\nGPU-bbb, 1\\n' ;;
  --query-compute-apps=gpu_uuid,pid) printf 'GPU-aaa, 101\\nGPU-aaa, 102\\nGPU-aaa, 7\\nGPU-bbb, 103\\n' ;;
  *) exit 2 ;;
esac
"""


def test_compute_processes_are_counted_per_gpu_and_raise_each_job_s_most(tmp_path, monkeypatch):
    fake = tmp_path / "nvidia-smi"
    fake.write_text(FAKE_NVIDIA_SMI)
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    counts = compute_process_counts()
    assert counts == {"0": 3, "1": 1}
    jobs = [Job(gpu_job, "grpo", 0, gpu=gpu, gpu_process_readings=readings)
            for gpu_job, gpu, readings in (("a", "0", [(100.0, 1)]), ("b", "1", [(100.0, 2)]), ("c", "0,1", []))]
    note_gpu_processes(jobs, counts, 123.0)
    assert [job.gpu_processes_seen for job in jobs] == [3, 2, 3]  # never lowered; a two-GPU job: its busiest
    assert [job.gpu_process_readings[-1] for job in jobs] == [(123.0, 3), (123.0, 1), (123.0, 3)]
    twin = dataclasses.replace(jobs[0], name="a-tool")  # as tool_modes.py pairs a job with its tool twin
    note_gpu_processes([twin], {"0": 5}, 130.0)
    assert jobs[0].gpu_process_readings == [(100.0, 1), (123.0, 3)]  # the twin's reading is its own


def test_no_nvidia_smi_reads_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert compute_process_counts() == {}


def test_gpu_time_is_split_among_the_processes_sharing_it():
    # The run [0, 100]; another process on its GPU over [0, 50], a third over [25, 100]:
    # 25 s shared by 2, 25 s by 3, 50 s by 2 = 12.5 + 8.33 + 25.
    seconds, most = fair_share(0, 100, [(0, 100), (0, 50), (25, 100)])
    assert seconds == pytest.approx(12.5 + 25 / 3 + 25) and most == 3
    assert fair_share(10, 20, [(0, 100)]) == (10, 1)


def test_gpu_time_is_divided_by_nvidia_smis_count_where_it_lists_more_than_the_invocations_jobs():
    """Another invocation's two jobs share the GPU from t=40 (nvidia-smi lists 3 processes), then leave at 70
    (it lists 1): [0, 40) alone, [40, 70) a third, [70, 100) alone = 40 + 10 + 30 s; the invocation's own share
    stays 1. A reading lower than the own jobs' count never raises the charge."""
    seconds, most = fair_share(0, 100, [(0, 100)], [(10, 1), (40, 3), (70, 1)])
    assert seconds == pytest.approx(40 + 30 / 3 + 30) and most == 1
    seconds, _ = fair_share(0, 100, [(0, 100), (0, 100)], [(5, 1)])  # own 2 > nvidia-smi's 1
    assert seconds == pytest.approx(50)
