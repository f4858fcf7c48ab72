"""The fast policy path: chunked log-prob head, padding removal (varlen attention) and token-budget
micro-batches must compute exactly what the naive padded, full-logits forward computes."""

import copy
import math

import numpy as np
import pytest
import torch

from core.engine.distributed import init_distributed
from core.engine.fsdp import FSDPEngine, OptimConfig
from core.engine.logprob_head import log_probs_and_entropy
from core.engine.packing import response_rows, split_groups_to, token_budget_groups
from core.models.tiny import build_tiny_tokenizer
from tests.helpers_policy import sampled_batch, tiny_policy


# ---- the chunked head ------------------------------------------------------------------------------
def test_head_on_a_hand_computed_example():
    # z = (0, ln 3): p = (1/4, 3/4); log p(1) = ln(3/4); H = −(¼ ln ¼ + ¾ ln ¾) = 0.562335...
    hidden, weight = torch.tensor([[1.0]]), torch.tensor([[0.0], [math.log(3.0)]])
    log_prob, entropy = log_probs_and_entropy(hidden, weight, torch.tensor([1]))
    assert log_prob.item() == pytest.approx(math.log(0.75), abs=1e-6)
    assert entropy.item() == pytest.approx(-(0.25 * math.log(0.25) + 0.75 * math.log(0.75)), abs=1e-6)
    # Temperature 2 halves the logits: z = (0, ln 3 / 2), p(1) = √3 / (1 + √3).
    log_prob, _ = log_probs_and_entropy(hidden, weight, torch.tensor([1]), temperature=2.0)
    assert log_prob.item() == pytest.approx(math.log(math.sqrt(3) / (1 + math.sqrt(3))), abs=1e-6)


def test_head_entropy_is_stable_for_large_logits():
    # z = (1000, 1000, −1000): two equally likely tokens, H = ln 2; lse − Σ p·z would cancel ~1000s in fp32.
    hidden, weight = torch.tensor([[1000.0]]), torch.tensor([[1.0], [1.0], [-1.0]])
    log_prob, entropy = log_probs_and_entropy(hidden, weight, torch.tensor([0]))
    assert entropy.item() == pytest.approx(math.log(2.0), abs=1e-6)
    assert log_prob.item() == pytest.approx(-math.log(2.0), abs=1e-6)


@pytest.mark.parametrize("chunk_tokens", [1, 3, 64])
def test_head_values_and_gradients_equal_full_logits_autograd(chunk_tokens):
    gen = torch.Generator().manual_seed(chunk_tokens)
    hidden = torch.randn(9, 6, generator=gen, requires_grad=True)
    weight = torch.randn(13, 6, generator=gen, requires_grad=True)
    labels, temperature = torch.randint(0, 13, (9,), generator=gen), 0.7
    w_lp, w_ent = torch.randn(9, generator=gen), torch.randn(9, generator=gen)

    log_prob, entropy = log_probs_and_entropy(hidden, weight, labels, temperature, chunk_tokens)
    full = torch.log_softmax(hidden @ weight.t() / temperature, dim=-1)  # (9, 13)
    ref_lp, ref_ent = full.gather(-1, labels[:, None]).squeeze(-1), -(full.exp() * full).sum(-1)
    torch.testing.assert_close(log_prob, ref_lp, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(entropy, ref_ent, rtol=1e-5, atol=1e-6)
    grads = torch.autograd.grad((log_prob * w_lp + entropy * w_ent).sum(), (hidden, weight))
    ref_grads = torch.autograd.grad((ref_lp * w_lp + ref_ent * w_ent).sum(), (hidden, weight), retain_graph=True)
    for grad, ref in zip(grads, ref_grads):
        torch.testing.assert_close(grad, ref, rtol=1e-4, atol=1e-5)
    # Only the log-probs in the loss: the entropy term must drop out of the gradient.
    (grad_h,) = torch.autograd.grad(log_probs_and_entropy(hidden, weight, labels, temperature)[0].sum(), hidden)
    torch.testing.assert_close(grad_h, torch.autograd.grad(ref_lp.sum(), hidden)[0], rtol=1e-4, atol=1e-5)


# ---- token-budget micro-batches -------------------------------------------------------------------
def test_token_budget_groups_first_fit_decreasing():
    # Longest first: 8 fills group 0; 5 opens group 1; 3 joins it (8); 2 opens group 2.
    assert token_budget_groups(np.array([5, 3, 8, 2]), 8) == [[2], [0, 1], [3]]
    # A sequence over the budget is not dropped: it travels alone.
    assert token_budget_groups(np.array([10, 1, 1]), 8) == [[0], [1, 2]]
    with pytest.raises(ValueError, match="micro_batch_tokens"):
        token_budget_groups(np.array([1]), 0)


def test_split_groups_to_splits_the_largest_group_into_halves_by_length():
    lengths = np.array([5, 3, 8, 2, 4])
    # Groups of 13, 5 and 4 tokens; the 13-token one splits first, its rows by length 8, 3, 2 taken alternately:
    # [2, 3] (10 tokens) and [1] (3). Then the 10-token one: [2] and [3].
    assert split_groups_to([[1, 2, 3], [0], [4]], lengths, 4) == [[0], [4], [2, 3], [1]]
    assert split_groups_to([[1, 2, 3], [0], [4]], lengths, 5) == [[0], [4], [1], [2], [3]]
    assert split_groups_to([[0], [1]], lengths, 2) == [[0], [1]]  # as many already: unchanged
    with pytest.raises(ValueError, match="2 rows on this rank cannot make the 3 micro-batches"):
        split_groups_to([[0], [1]], lengths[:2], 3)


# ---- the engine: packed == padded == naive ---------------------------------------------------------
@pytest.fixture(scope="module")
def tokenizer():
    return build_tiny_tokenizer()


@pytest.fixture(scope="module")
def model(tokenizer):
    return tiny_policy(tokenizer)


@pytest.fixture(scope="module")
def rollout_batch(model, tokenizer, tmp_path_factory):
    out = sampled_batch(model, tokenizer, tmp_path_factory.mktemp("data"), prompts=8, n=3, max_new_tokens=16)
    lengths = out["response_mask"].sum(1)
    assert lengths.min() < lengths.max() and (out["attention_mask"][:, 0] == 0).any(), "batch is not ragged"
    return out


def _engine(model, **kwargs):
    return FSDPEngine(copy.deepcopy(model), init_distributed("cpu"), optim=OptimConfig(lr=1e-2, grad_clip=1e9),
                      mixed_precision="fp32", **kwargs)


def test_packed_rows_hold_only_real_tokens(rollout_batch):
    rows = response_rows(rollout_batch, torch.device("cpu"), packed=True)
    assert rows.input_ids.shape[1] == int(rollout_batch["attention_mask"].sum())
    assert rows.cu_seqlens.tolist()[-1] == rows.input_ids.shape[1]
    # Each predicted label is the token right after its predicting position in the packed row.
    torch.testing.assert_close(rows.input_ids[0, rows.predict_index + 1], rows.labels)
    assert len(rows.labels) == int(rollout_batch["response_mask"].sum())


def test_log_probs_packed_equal_padded_equal_naive_full_logits(model, rollout_batch):
    temperature = 0.8
    packed = _engine(model, remove_padding=True, micro_batch_size=5).compute_log_probs(rollout_batch, temperature)
    padded = _engine(model, remove_padding=False, micro_batch_size=7).compute_log_probs(rollout_batch, temperature)
    with torch.no_grad():
        logits = model(input_ids=rollout_batch["input_ids"], attention_mask=rollout_batch["attention_mask"],
                       position_ids=rollout_batch["position_ids"]).logits
    width = rollout_batch["responses"].shape[1]
    naive = torch.log_softmax(logits[:, -width - 1:-1] / temperature, -1)
    naive = naive.gather(-1, rollout_batch["responses"][..., None]).squeeze(-1) * rollout_batch["response_mask"]
    torch.testing.assert_close(padded, naive, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(packed, naive, rtol=1e-5, atol=1e-5)


def _one_update(engine, batch) -> dict:
    def loss_fn(log_probs, entropy, micro, num_tokens, num_seqs):
        return -(log_probs * micro["advantages"] * micro["response_mask"]).sum() / num_tokens, {}

    metrics = engine.update(batch, loss_fn, mini_batch_size=len(batch))
    # Adam's first moment after one step is (1 − β1)·gradient: the gradients, compared directly
    # (the weights themselves move by ±lr wherever a gradient is nonzero, noise included).
    moments = {name: engine.optimizer.state[param]["exp_avg"] for name, param in engine.model.named_parameters()}
    return metrics, {name: getattr(m, "full_tensor", lambda m=m: m)() for name, m in moments.items()}


@pytest.mark.parametrize("variant", [dict(remove_padding=True, micro_batch_size=4),
                                     dict(remove_padding=True, micro_batch_tokens=120),
                                     dict(remove_padding=False, micro_batch_tokens=90)])
def test_one_update_is_the_same_packed_or_padded_by_rows_or_token_budget(model, rollout_batch, variant):
    ref_metrics, ref_grads = _one_update(_engine(model, remove_padding=False, micro_batch_size=24), rollout_batch)
    metrics, grads = _one_update(_engine(model, **variant), rollout_batch)
    assert metrics["actor/grad_norm"] == pytest.approx(ref_metrics["actor/grad_norm"], rel=1e-5)
    for name, grad in ref_grads.items():
        torch.testing.assert_close(grads[name], grad, rtol=1e-4, atol=1e-7, msg=name)
    assert sum(float(g.abs().sum()) for g in ref_grads.values()) > 0


def test_a_model_switched_to_packed_attention_still_runs_padded_rows(model, rollout_batch):
    # The switch lives on the model's config, which `from_config` shares: an unpacked, padded forward
    # through the same model must still see its padding mask.
    from core.engine.packing import register_varlen_attention

    packed_model = copy.deepcopy(model)
    packed_model.set_attn_implementation(register_varlen_attention())
    inputs = {k: rollout_batch[k] for k in ("input_ids", "attention_mask", "position_ids")}
    with torch.no_grad():
        expected, got = model(**inputs).logits, packed_model(**inputs).logits
    real = rollout_batch["attention_mask"].bool()
    torch.testing.assert_close(got[real], expected[real], rtol=1e-5, atol=1e-5)


def test_llama_family_runs_packed_too(model, rollout_batch):
    """Llama's decoder (SmolLM2's) builds its mask itself, unlike Qwen3's: a packed row must still reach
    the varlen attention without a mask (a per-layer mask mapping crashed it in transformers 5.17)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    qwen = model.config
    config = LlamaConfig(vocab_size=qwen.vocab_size, hidden_size=qwen.hidden_size, intermediate_size=qwen.intermediate_size,
                         num_hidden_layers=2, num_attention_heads=qwen.num_attention_heads,
                         num_key_value_heads=qwen.num_key_value_heads, initializer_range=0.2,
                         pad_token_id=qwen.pad_token_id, eos_token_id=qwen.eos_token_id)
    torch.manual_seed(0)
    llama = LlamaForCausalLM(config).eval()
    packed = _engine(llama, remove_padding=True, micro_batch_size=5).compute_log_probs(rollout_batch, 1.0)
    padded = _engine(llama, remove_padding=False, micro_batch_size=7).compute_log_probs(rollout_batch, 1.0)
    torch.testing.assert_close(packed, padded, rtol=1e-5, atol=1e-5)
