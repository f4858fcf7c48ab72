"""`model.init=random`: the weights every role, a resumed run and `recipezoo merge` rebuild from the seed."""

from types import SimpleNamespace

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from core.models.random_init import build_causal_lm, build_value_model, init_random_weights

RANDOM = SimpleNamespace(init="random", gguf_file=None, trust_remote_code=False)


def test_a_seed_gives_the_same_weights_whatever_the_thread_count(random_model_dir):
    first, second = build_causal_lm(RANDOM, random_model_dir, seed=3), build_causal_lm(RANDOM, random_model_dir, seed=3)
    init_random_weights(second, seed=3, std=second.config.initializer_range, threads=1)  # redrawn on one thread
    for (name, a), (_, b) in zip(first.state_dict().items(), second.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    other = build_causal_lm(RANDOM, random_model_dir, seed=4)
    assert not torch.equal(other.model.embed_tokens.weight, first.model.embed_tokens.weight)


def test_the_model_is_hf_s_own_with_its_draws(random_model_dir):
    """Same parameters, buffers (rotary frequencies, computed by the constructor) and tying as HF's own
    build; matrices N(0, initializer_range²), norms 1, biases 0; torch's init functions are restored."""
    normal = torch.nn.init.normal_
    ours = build_causal_lm(RANDOM, random_model_dir, seed=0)
    config = AutoConfig.from_pretrained(random_model_dir)
    theirs = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    assert torch.nn.init.normal_ is normal
    assert [(n, p.shape) for n, p in ours.named_parameters()] == [(n, p.shape) for n, p in theirs.named_parameters()]
    for (name, a), (_, b) in zip(ours.named_buffers(), theirs.named_buffers(), strict=True):
        assert torch.equal(a, b), name
    assert (ours.lm_head.weight is ours.model.embed_tokens.weight) == bool(config.tie_word_embeddings)
    embed = ours.model.embed_tokens.weight
    assert embed.std().item() == pytest.approx(config.initializer_range, rel=0.05) and abs(embed.mean().item()) < 1e-3
    norms = [p for n, p in ours.named_parameters() if n.endswith("norm.weight")]
    assert norms and all(torch.equal(p, torch.ones_like(p)) for p in norms)
    with torch.no_grad():
        logits = ours(torch.tensor([[1, 2, 3]])).logits
    assert torch.isfinite(logits).all()


def test_the_critic_s_head_is_drawn_too(random_model_dir):
    critic = build_value_model(RANDOM, random_model_dir, seed=0)
    head = critic.score.weight
    assert head.shape[0] == 1 and head.abs().sum() > 0 and torch.isfinite(head).all()
