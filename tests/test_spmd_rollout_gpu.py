"""Two ranks under torchrun on two GPUs, each with the trainer's vLLM rollout (CUDA + vLLM; skipped
elsewhere, as tests/test_packing_gpu.py is). Before the SPMD placement, both ranks' engines sat on
GPU 0 and the second died for lack of KV-cache memory."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(torch.cuda.device_count() < 2 or shutil.which("nvidia-smi") is None,
                                reason="needs 2 CUDA GPUs")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    pytest.importorskip("vllm")
    from bench.scale.suite import model_dir as make_model_dir

    return make_model_dir(ROOT / "bench/configs/qwen3-0.6b", tmp_path_factory.mktemp("spmd"))


@pytest.mark.parametrize("tp", [1, 2])
def test_each_rank_engine_sits_on_its_own_gpu(model_dir, tp, tmp_path):
    out = tmp_path / "report.json"
    subprocess.run(["torchrun", "--nproc_per_node", "2", str(ROOT / "tests/dist/spmd_vllm.py"), str(model_dir),
                    str(tp), str(out)], cwd=ROOT, check=True, timeout=600)
    report = json.loads(out.read_text())
    for rank in report["ranks"]:
        assert rank["engine_device"] == f"cuda:{rank['rank']}", rank
        assert rank["rows_out"] == 2 * rank["rows_in"], rank  # n=2 samples of this rank's own prompts
        used = {app["gpu"]: app["mib"] for app in report["apps"] if app["pid"] == rank["pid"]}
        # gpu_memory_utilization=0.3: tens of GiB of weights + KV cache on the rank's own GPU only
        assert used.get(rank["rank"], 0) > 10 * 1024, (rank, report["apps"])
        assert used.get(1 - rank["rank"], 0) < 2 * 1024, (rank, report["apps"])
