"""The SGLang backend's checks and bookkeeping on CPU. SGLang runs on NVIDIA GPUs only and cannot be installed
here, so what needs it is stood in for: its version (monkeypatched `installed_versions`), its package dir (a few
model files with SGLang's `EntryClass` lines) and its engine (a recorder of calls). Each test says which.
The real engine is tests/test_sglang_gpu.py's."""

import json
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from core.batch import Batch
from core.cli import main as cli_main
from core.config import ConfigError
from core.rollout import sglang as backend
from core.rollout.base import SamplingParams
from core.rollout.placement import EnginePlacement

ROOT = Path(__file__).resolve().parents[1]

ROLLOUT_CFG = OmegaConf.create({"tensor_model_parallel_size": 1, "gpu_memory_utilization": 0.4,
                                "enforce_eager": False, "free_cache_engine": True})
PINNED = {"sglang": "0.5.17", "torch": "2.11.0+cu130"}
FIX = "pip install --require-hashes -r bench/requirements-sglang.txt"


@pytest.fixture
def fake_sglang_dir(tmp_path, monkeypatch):
    """Stand-in for SGLang's package dir: two model files written the way SGLang 0.5.17 writes them."""
    models = tmp_path / "sglang" / "srt" / "models"
    models.mkdir(parents=True)
    (models / "llama.py").write_text("class LlamaForCausalLM: ...\n\nEntryClass = [\n    LlamaForCausalLM,\n"
                                     "    Phi3ForCausalLM,\n]\n")
    (models / "qwen3.py").write_text("EntryClass = Qwen3ForCausalLM\n")
    (models / "utils.py").write_text("x = 1  # no EntryClass\n")
    monkeypatch.setattr(backend, "sglang_package_dir", lambda: tmp_path / "sglang")
    return tmp_path / "sglang"


@pytest.fixture
def no_engine(monkeypatch):
    """A stand-in `sglang` module whose Engine must never be built: the checks come first."""
    def engine(**kwargs):
        raise AssertionError("the engine started before the checks failed")

    monkeypatch.setitem(sys.modules, "sglang", types.SimpleNamespace(Engine=engine))


def model_dir(tmp_path, architectures):
    path = tmp_path / "model"
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"architectures": architectures}))
    return str(path)


def test_install_problem_names_the_version_found_and_the_fix():
    assert backend.install_problem(PINNED) is None
    assert backend.install_problem({"sglang": "0.5.17.post1", "torch": "2.11.0"}) is None
    absent = backend.install_problem({"sglang": None, "torch": "2.13.0+cpu"})
    assert "needs SGLang 0.5.17, which is not installed" in absent and "rollout.name=hf or vllm" in absent
    old = backend.install_problem({"sglang": "0.5.10.post1", "torch": "2.11.0"})
    assert "needs SGLang 0.5.17, found sglang 0.5.10.post1" in old
    torch_mismatch = backend.install_problem({"sglang": "0.5.17", "torch": "2.13.0+cpu"})
    assert "sglang 0.5.17 needs torch 2.11.0, found torch 2.13.0+cpu" in torch_mismatch
    for message in (absent, old, torch_mismatch):
        assert message.startswith("rollout.name=sglang") and FIX in message and "\n" not in message


def test_a_version_outside_the_pin_fails_before_the_engine_starts(monkeypatch, no_engine, tmp_path):
    # sglang 0.5.10 reported by a stand-in: no real SGLang can be installed on this CPU machine.
    monkeypatch.setattr(backend, "installed_versions", lambda: {"sglang": "0.5.10", "torch": "2.11.0"})
    with pytest.raises(ConfigError, match="needs SGLang 0.5.17, found sglang 0.5.10: " + FIX):
        backend.SGLangRollout(model_dir(tmp_path, ["LlamaForCausalLM"]), None, ROLLOUT_CFG)


@pytest.mark.skipif(backend.installed_versions()["sglang"] is not None, reason="SGLang is installed here")
def test_without_sglang_the_backend_fails_in_one_line(no_engine, tmp_path):
    with pytest.raises(ConfigError, match="which is not installed") as error:
        backend.SGLangRollout(model_dir(tmp_path, ["LlamaForCausalLM"]), None, ROLLOUT_CFG)
    assert FIX in str(error.value)


def test_architectures_are_read_from_the_entry_classes(fake_sglang_dir):
    assert backend.sglang_architectures(fake_sglang_dir) == {"LlamaForCausalLM", "Phi3ForCausalLM", "Qwen3ForCausalLM"}


def test_a_model_sglang_cannot_serve_fails_before_the_engine_starts(monkeypatch, no_engine, fake_sglang_dir, tmp_path):
    monkeypatch.setattr(backend, "installed_versions", lambda: PINNED)  # stand-in: SGLang is not installable here
    path = model_dir(tmp_path, ["RwkvForCausalLM"])
    with pytest.raises(ConfigError, match=r"cannot serve model.path=.*: SGLang 0.5.17 has no implementation of its "
                                          r"architectures \['RwkvForCausalLM'\]; use rollout.name=vllm or hf"):
        backend.SGLangRollout(path, None, ROLLOUT_CFG)


def test_a_served_architecture_passes_the_check(fake_sglang_dir, tmp_path):
    assert backend.check_architecture(model_dir(tmp_path, ["Phi3ForCausalLM"])) == "Phi3ForCausalLM"


@pytest.mark.skipif(backend.installed_versions()["sglang"] is not None, reason="SGLang is installed here")
def test_train_with_sglang_missing_fails_before_any_model_loads(fast_overrides, tmp_path, capsys, monkeypatch):
    import core.trainer.workers as workers

    def no_model(*args, **kwargs):
        raise AssertionError("a model was built before the SGLang check")

    monkeypatch.setattr(workers, "build_causal_lm", no_model)
    assert cli_main(["train", "--recipe", "grpo", *fast_overrides, "rollout.name=sglang"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("recipezoo: config error: rollout.name=sglang needs SGLang")
    assert FIX in err


def test_engine_kwargs_follow_the_rollout_config():
    single = EnginePlacement(rank=0, world_size=1, tensor_parallel_size=1)
    kwargs = backend.engine_kwargs("/m", ROLLOUT_CFG, single, dtype="bfloat16", seed=3, max_model_len=640,
                                   dummy_weights=True)
    assert kwargs == {"model_path": "/m", "dtype": "bfloat16", "model_impl": "sglang", "skip_tokenizer_init": True,
                      "mem_fraction_static": 0.4, "context_length": 640, "enable_memory_saver": True,
                      "enable_weights_cpu_backup": True, "disable_cuda_graph": False, "sampling_backend": "pytorch",
                      "tp_size": 1, "base_gpu_id": 0, "random_seed": 3, "load_format": "dummy"}
    eager_awake = OmegaConf.merge(ROLLOUT_CFG, {"enforce_eager": True, "free_cache_engine": False})
    kwargs = backend.engine_kwargs("/m", eager_awake, single, dtype="bfloat16", seed=0, max_model_len=None,
                                   dummy_weights=False)
    assert kwargs["disable_cuda_graph"] and not kwargs["enable_memory_saver"] and "load_format" not in kwargs


def test_rollout_engine_kwargs_add_and_override_the_backends_own():
    single = EnginePlacement(rank=0, world_size=1, tensor_parallel_size=1)
    cfg = OmegaConf.merge(ROLLOUT_CFG, {"engine_kwargs": {"attention_backend": "triton", "sampling_backend": "flashinfer"}})
    kwargs = backend.engine_kwargs("/m", cfg, single, dtype="bfloat16", seed=0, max_model_len=None, dummy_weights=False)
    assert kwargs["attention_backend"] == "triton" and kwargs["sampling_backend"] == "flashinfer"


class RecordingEngine:
    """Stands in for `sglang.Engine` (GPU only): answers generate like SGLang 0.5.17 with skip_tokenizer_init, and
    records the weight and memory calls."""

    def __init__(self):
        self.calls = []

    def generate(self, input_ids, sampling_params, return_logprob):
        self.calls.append(("generate", sampling_params))
        lengths = [1 + i % 3 for i in range(len(input_ids))]
        return [{"output_ids": [7] * (n - 1) + [2], "meta_info": {"output_token_logprobs": [(-0.5, 7, None)] * n}}
                for n in lengths]

    def update_weights_from_tensor(self, named_tensors, flush_cache):
        self.calls.append(("update", [name for name, _ in named_tensors], {t.dtype for _, t in named_tensors},
                           flush_cache))

    def flush_cache(self):
        self.calls.append(("flush",))

    def release_memory_occupation(self, tags):
        self.calls.append(("release", tuple(tags)))

    def resume_memory_occupation(self, tags):
        self.calls.append(("resume", tuple(tags)))


def stand_in_rollout():
    tokenizer = types.SimpleNamespace(eos_token_id=2, pad_token_id=0)
    return backend.SGLangRollout.from_engine(RecordingEngine(), tokenizer, can_sleep=True)


def test_generate_pads_responses_and_keeps_sglang_log_probs():
    rollout = stand_in_rollout()
    prompts = Batch({"input_ids": torch.tensor([[0, 5, 6], [4, 5, 6]]),
                     "attention_mask": torch.tensor([[0, 1, 1], [1, 1, 1]])})  # the first prompt left-padded
    out = rollout.generate(prompts, SamplingParams(n=2, temperature=0.7, top_p=0.9, max_new_tokens=3))
    assert rollout.engine.calls == [("generate", {"max_new_tokens": 3, "stop_token_ids": [2], "temperature": 0.7,
                                                  "top_p": 0.9, "top_k": -1})]
    assert out["responses"].tolist() == [[2, 0, 0], [7, 2, 0], [7, 7, 2], [2, 0, 0]]
    assert out["response_mask"].tolist() == [[1, 0, 0], [1, 1, 0], [1, 1, 1], [1, 0, 0]]
    assert torch.equal(out["rollout_log_probs"], -0.5 * out["response_mask"].float())


def test_a_response_ends_where_the_engine_stopped_even_on_a_token_other_than_the_tokenizers_eos():
    """The engine also stops on the model's end-of-turn tokens (generation_config.json). Were the mask to end at the
    tokenizer's EOS alone, a row stopped on another token would run on into its padding, and train on it."""
    rollout = stand_in_rollout()
    rollout.tokenizer = types.SimpleNamespace(eos_token_id=5, pad_token_id=0)  # the engine stops on 2
    prompts = Batch({"input_ids": torch.tensor([[4, 5, 6]]), "attention_mask": torch.ones(1, 3, dtype=torch.long)})
    out = rollout.generate(prompts, SamplingParams(n=3, temperature=1.0, max_new_tokens=3))
    assert out["responses"].tolist() == [[2, 0, 0], [7, 2, 0], [7, 7, 2]]
    assert out["response_mask"].tolist() == [[1, 0, 0], [1, 1, 0], [1, 1, 1]]


def test_the_bookkeeping_around_the_engine_call_runs_on_one_torch_thread_and_restores_the_count():
    """Small tensor ops fanned out over torch's pool wait on a busy host for their slowest thread; the engine call
    itself keeps the process's thread count. In a fresh interpreter: in this one, an earlier test's OpenMP state
    may pin the count."""
    script = """
import torch
from core.batch import Batch
from core.rollout import base
from core.rollout.base import SamplingParams
from tests.test_rollout_sglang import stand_in_rollout

seen, assemble = {}, base.assemble_rollout
def recording_assemble(*args, **kwargs):
    seen["bookkeeping"] = torch.get_num_threads()
    return assemble(*args, **kwargs)
base.assemble_rollout = recording_assemble
rollout = stand_in_rollout()
answer = rollout.engine.generate
def counting_generate(*args, **kwargs):
    seen["engine"] = torch.get_num_threads()
    return answer(*args, **kwargs)
rollout.engine.generate = counting_generate
torch.set_num_threads(2)
rollout.generate(Batch({"input_ids": torch.tensor([[4, 5, 6]]), "attention_mask": torch.ones(1, 3).long()}),
                 SamplingParams(n=2, temperature=1.0, max_new_tokens=3))
print(seen["bookkeeping"], seen["engine"], torch.get_num_threads())
"""
    found = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True)
    assert found.stdout.split() == ["1", "2", "2"], found.stderr[-2000:]


def test_a_log_prob_list_of_another_length_than_its_tokens_is_an_error():
    """One log-prob missing (or one too many) would shift a row's log-probs against its tokens silently."""
    rollout = stand_in_rollout()
    answer = rollout.engine.generate
    rollout.engine.generate = lambda *a, **k: [{**out, "meta_info": {"output_token_logprobs": [(-0.5, 7, None)]}}
                                               for out in answer(*a, **k)]
    prompts = Batch({"input_ids": torch.tensor([[4, 5, 6]] * 2), "attention_mask": torch.ones(2, 3, dtype=torch.long)})
    with pytest.raises(ValueError, match="rollout row 1: the engine returned 2 tokens but 1 log-probs"):
        rollout.generate(prompts, SamplingParams(n=1, temperature=1.0, max_new_tokens=3))


def test_weight_sync_wakes_the_weights_alone_sends_chunks_in_bf16_and_flushes_once(monkeypatch):
    monkeypatch.setattr(backend, "WEIGHT_SYNC_CHUNK_BYTES", 64)  # 16 fp32 values: a and b do not fit together
    rollout = stand_in_rollout()
    rollout.sleep()
    rollout.load_weights({"a": torch.zeros(10), "b": torch.zeros(10), "c": torch.zeros(40), "step": torch.zeros(2).long()})
    assert rollout.engine.calls == [
        ("release", ("weights", "kv_cache", "cuda_graph")), ("resume", ("weights",)),
        ("update", ["a"], {torch.bfloat16}, False), ("update", ["b"], {torch.bfloat16}, False),
        ("update", ["c"], {torch.bfloat16}, False), ("update", ["step"], {torch.long}, False), ("flush",)]
    rollout.engine.calls.clear()
    rollout.sleep()  # the weights went back to work: only they are released again
    rollout.wake_up()
    assert rollout.engine.calls == [("release", ("weights",)), ("resume", ("weights", "kv_cache", "cuda_graph"))]
