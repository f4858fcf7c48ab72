"""bench/perf/train_mfu_gpu.py on CPU: its loss config matches what the actor loss reads (the bench had fallen behind
KL-Cov's coefficient and failed on the GPU at its first update), and `--num-layers` refuses a count the config
cannot give before anything starts. The MFU numbers themselves come only from a GPU (results/perf)."""

import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]

from bench.perf.train_mfu_gpu import ACTOR, rl_batch  # noqa: E402
from core.algos.actor_loss import make_actor_loss  # noqa: E402


def test_the_bench_actor_config_drives_the_actor_loss():
    batch = rl_batch(4, 1000)
    loss_fn = make_actor_loss(ACTOR, max_response_length=batch["response_mask"].shape[1])
    log_probs = torch.randn(batch["response_mask"].shape, requires_grad=True)
    loss, _ = loss_fn(log_probs, torch.zeros_like(log_probs), batch, int(batch["response_mask"].sum()), len(batch))
    loss.backward()
    assert log_probs.grad is not None and torch.isfinite(loss)


def test_num_layers_beyond_the_config_is_one_line():
    result = subprocess.run([sys.executable, "-m", "bench.perf.train_mfu_gpu", "--config-dir",
                             str(ROOT / "bench" / "configs" / "qwen3-0.6b"), "--name", "x", "--out", "/nonexistent",
                             "--num-layers", "99"], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 2
    assert "--num-layers 99: expected 1 to the config's 28" in result.stderr


def test_an_unknown_variant_is_one_line_before_the_gpu_is_touched():
    result = subprocess.run([sys.executable, "-m", "bench.perf.train_mfu_gpu", "--config-dir",
                             str(ROOT / "bench" / "configs" / "qwen3-0.6b"), "--name", "x", "--out", "/nonexistent",
                             "--variants", "ours_compiled_ckpt6@8192,ours_fast"], capture_output=True, text=True,
                            cwd=ROOT)
    assert result.returncode == 2
    assert "--variants: ours_fast: expected naive, ours or ours_compiled" in result.stderr
