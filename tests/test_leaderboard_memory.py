"""The leaderboard driver's warning when --runs-per-gpu jobs would not fit one GPU together (bench/leaderboard/memory.py).

No GPU here: nvidia-smi is a stand-in script on PATH that prints an H100's 81559 MiB, as the real one does."""

import sys
from pathlib import Path

import pytest

from bench.leaderboard.gpus import gpu_total_bytes  # noqa: E402
from bench.leaderboard.memory import jobs_memory_warning, runs_per_gpu_warning  # noqa: E402
from core.trainer.memory_estimate import GIB  # noqa: E402


def test_four_coder_jobs_on_an_h200_by_hand():
    # 4 × 33.5 = 134.0 GiB > 0.95 × 139.8 = 132.81 GiB; 3 fit: 100.5 GiB.
    line = runs_per_gpu_warning({"gspo": 33.5 * GIB, "grpo": 30 * GIB}, 4, 139.8 * GIB, "NVIDIA H200")
    assert line == ("warning: --runs-per-gpu 4: a gspo job's update must hold 33.5 GiB (its memory plan), 4 of them "
                    "134.0 GiB, over 95% of the NVIDIA H200's 139.8 GiB: jobs may run out of memory; --runs-per-gpu 3 "
                    "fits it (100.5 GiB)")
    assert runs_per_gpu_warning({"gspo": 33.5 * GIB}, 3, 139.8 * GIB, "NVIDIA H200") is None
    assert runs_per_gpu_warning({"gspo": 200 * GIB}, 1, 139.8 * GIB, "NVIDIA H200") is None  # the launch check's
    assert runs_per_gpu_warning({"gspo": 140 * GIB}, 2, 139.8 * GIB, "NVIDIA H200").endswith("one job alone does not")


@pytest.fixture
def fake_nvidia_smi(tmp_path, monkeypatch):
    script = tmp_path / "bin" / "nvidia-smi"
    script.parent.mkdir()
    script.write_text("#!/bin/sh\necho 81559\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{script.parent}:{Path(sys.executable).parent}:/usr/bin:/bin")


def test_the_driver_commands_plans_sum_over_the_jobs_of_a_gpu(fake_nvidia_smi, random_model_dir):
    """Each row's plan comes from the command the driver would run: a 30 GiB KV cache makes a job hold more than
    30 GiB, so 3 of them pass 95% of an 80 GB GPU, and 2 do not."""
    from bench.leaderboard.driver import Job
    from bench.leaderboard.tiny_baselines import VARIANTS

    assert gpu_total_bytes("0") == 81559 * 2**20 and gpu_total_bytes("") is None

    def command_of(job):
        return [sys.executable, "-m", "bench.leaderboard.job", "--recipe", VARIANTS[job.variant], "--name", job.variant,
                "--",
                f"model.path={random_model_dir}", "rollout.name=vllm", "rollout.free_cache_engine=false",
                f"+rollout.engine_kwargs.kv_cache_memory_bytes={30 * GIB}", f"trainer.seed={job.seed}"]

    jobs = [Job("pretrained", None, 0), Job("grpo-seed0", "grpo", 0, row="grpo"), Job("grpo-seed1", "grpo", 1, row="grpo")]
    devices = {"0": "NVIDIA H100 80GB HBM3"}
    line = jobs_memory_warning(jobs, command_of, random_model_dir, ["0"], devices, 3)
    assert line.startswith("warning: --runs-per-gpu 3: a grpo job's update must hold 3") and "NVIDIA H100" in line
    assert "--runs-per-gpu 2 fits it" in line
    assert jobs_memory_warning(jobs, command_of, random_model_dir, ["0"], devices, 2) is None
    assert jobs_memory_warning(jobs, command_of, random_model_dir, [""], {}, 3) is None  # CPU: nothing to plan
