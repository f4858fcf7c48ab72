"""actor.expandable_segments (core/engine/allocator.py): the training phases' allocator setting, switched on only
while a colocated vLLM engine sleeps. vLLM's sleep mode needs CUDA, so the engine here is a stand-in that records
its calls (the setting's effect on memory is measured on GPUs: bench/scale/suite.py)."""

import pytest
import torch

from core.config import ConfigError, load_config
from core.engine import allocator
from core.rollout import vllm as vllm_rollout
from core.trainer.config_checks import validate_config


class RecordingEngine:
    """A vllm.LLM stand-in: sleep, wake_up and a weight load, each written to `log`."""

    def __init__(self, log: list):
        self.log = log

    def sleep(self, level):
        self.log.append("engine sleeps")

    def wake_up(self, tags):
        self.log.append(f"engine wakes {'+'.join(tags)}")

    def collective_rpc(self, function, args):
        self.log.append("engine loads weights")

    def reset_prefix_cache(self):
        pass


@pytest.fixture
def log(monkeypatch):
    calls = []
    monkeypatch.setattr(vllm_rollout, "set_expandable_segments", lambda on: calls.append(f"expandable {on}"))
    monkeypatch.setattr(vllm_rollout, "import_vllm", lambda: type("vllm", (), {"SamplingParams": dict}))
    return calls


def test_expandable_only_while_the_engine_sleeps(log):
    rollout = vllm_rollout.VLLMRollout.from_engine(RecordingEngine(log), tokenizer=None, can_sleep=True)
    rollout.expandable_while_asleep = True
    rollout.sleep()
    rollout.load_weights({})  # the sync wakes the weights: their pool allocates, so off first
    rollout.sleep()
    rollout.wake_up()
    assert log == ["engine sleeps", "expandable True", "expandable False", "engine wakes weights",
                   "engine loads weights", "engine sleeps", "expandable True", "expandable False",
                   "engine wakes weights+kv_cache"]


def test_off_by_default_the_setting_is_never_touched(log):
    rollout = vllm_rollout.VLLMRollout.from_engine(RecordingEngine(log), tokenizer=None, can_sleep=True)
    rollout.sleep()
    rollout.wake_up()
    assert log == ["engine sleeps", "engine wakes weights+kv_cache"]


def test_the_allocator_setting_goes_to_torch_on_cuda_and_nowhere_without(monkeypatch):
    settings = []
    monkeypatch.setattr(torch._C, "_accelerator_setAllocatorSettings", settings.append, raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    allocator.set_expandable_segments(True)
    assert settings == []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    allocator.set_expandable_segments(True)
    allocator.set_expandable_segments(False)
    assert settings == ["expandable_segments:True", "expandable_segments:False"]


def test_sglang_is_refused_in_one_line_naming_both_keys():
    config = load_config("grpo", ["actor.expandable_segments=true", "rollout.name=sglang"])
    with pytest.raises(ConfigError, match=r"^actor.expandable_segments=True with rollout.name='sglang' — "):
        validate_config(config, (1, "test"))
    validate_config(load_config("grpo", ["actor.expandable_segments=true", "rollout.name=vllm"]), (1, "test"))
