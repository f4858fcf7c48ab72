"""The policy's adapter seam (core/models/adapter.py): full weights give the trivial answers, a LoRA spec its own,
so the engine, the workers and the rollout ask it instead of branching on `actor.lora`."""

import pytest
import torch
from omegaconf import OmegaConf

from core.models.adapter import FULL_WEIGHTS, policy_adapter
from core.models.lora import LoraSpec

LORA = {"rank": 2, "alpha": 4.0, "dropout": 0.0, "target_modules": "all-linear", "sync": "merged"}


class TwoLinears(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.q_proj, self.lm_head = torch.nn.Linear(4, 6), torch.nn.Linear(6, 10)


def lora_adapter(**changes) -> LoraSpec:
    return policy_adapter(OmegaConf.create({**LORA, **changes}), base={"path": "base-model", "init": "pretrained"})


def test_without_a_rank_every_answer_is_the_plain_models():
    adapter, model = policy_adapter(OmegaConf.create({**LORA, "rank": None})), TwoLinears()
    assert adapter is FULL_WEIGHTS
    assert adapter.apply_to(model, torch.bfloat16, tensor_parallel=True) is model  # untouched, in fp32
    pairs = [("q_proj.weight", torch.ones(1))]
    assert list(adapter.hf_weights(pairs, with_adapters=False)) == pairs
    assert adapter.checkpoint_files({"w": pairs[0][1]}) == {"model": {"w": pairs[0][1]}} and adapter.saves_base
    assert not adapter.reference_is_base and adapter.rollout_adapter_rank is None
    assert adapter.gradient_checkpointing_kwargs is None
    assert adapter.adapter_parameter_count(lambda: pytest.fail("a plain policy builds no model to count")) == 0
    with pytest.raises(RuntimeError, match="needs an engine built with LoRA"):
        adapter.base_only(model)


def test_the_rollout_engine_serves_the_adapter_only_with_adapter_sync():
    assert lora_adapter(sync="adapter").rollout_adapter_rank == 2
    assert lora_adapter().rollout_adapter_rank is None  # merged: W + BA arrive as whole weights
    assert lora_adapter().reference_is_base and not lora_adapter().saves_base


def test_a_lora_checkpoint_keeps_the_adapters_and_a_spec_that_reads_back():
    adapter = lora_adapter(sync="adapter")
    a, b = torch.ones(2, 4), torch.zeros(6, 2)
    state = {"q_proj.lora_A.default.weight": a, "q_proj.lora_B.default.weight": b, "lm_head.weight": torch.ones(10, 6)}
    files = adapter.checkpoint_files(state)
    assert files["model"] == {"q_proj.lora_A.default.weight": a, "q_proj.lora_B.default.weight": b}  # no tied head
    assert "sync" not in files["lora"]  # the resuming run picks its own
    restored = LoraSpec.from_dict(files["lora"])
    assert (restored, restored.base, restored.sync) == (lora_adapter(), adapter.base, "merged")


def test_adapter_parameters_by_hand_and_no_lora_under_tensor_parallelism():
    # all-linear leaves out lm_head (the log-prob head reads its weight): rank 2 · (4 in + 6 out) for q_proj alone.
    assert lora_adapter().adapter_parameter_count(TwoLinears) == 2 * (4 + 6)
    assert lora_adapter(target_modules=["q_proj"]).adapter_parameter_count(TwoLinears) == 20
    with pytest.raises(ValueError, match="actor.lora with actor.tensor_parallel_size > 1 is not supported"):
        lora_adapter().apply_to(TwoLinears(), None, tensor_parallel=True)
