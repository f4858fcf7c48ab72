"""Models built from `model.path`'s config.json with random weights (`model.init=random`).

Speed and memory depend on the architecture, not on trained weights, so a scale run needs only a
config dir (config.json + tokenizer files): no download of 16 GB of weights. Every role that loads
"the policy" (actor, reference, an HF rollout copy), a resumed run and `recipezoo merge` of a LoRA
checkpoint must rebuild the same weights from the run's seed, on any machine.

The weights are drawn as HF's `_init_weights` draws them for these models (matrices and embeddings
N(0, initializer_range²), norms 1, biases 0), but each tensor from its own generator seeded by
(seed, position), on a pool of threads: torch draws a tensor on one core whatever its thread count,
and HF's pass (each module's own init at construction, then `_init_weights` again, one tensor at a
time) took minutes per copy of an 8B model. The draws do not depend on the thread count.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForTokenClassification, PreTrainedModel

from core.models.loading import init_fresh_value_head, load_causal_lm, load_value_model

MODEL_INITS = ("pretrained", "random")
TORCH_INITS = ("uniform_", "normal_", "trunc_normal_", "constant_", "ones_", "zeros_", "eye_", "dirac_",
               "xavier_uniform_", "xavier_normal_", "kaiming_uniform_", "kaiming_normal_", "orthogonal_", "sparse_")


def build_causal_lm(model_cfg, path: str, seed: int) -> torch.nn.Module:
    """The policy in fp32 master weights: `model.path`'s weights, or random ones (`model.init=random`)."""
    if model_cfg.init == "pretrained":
        return load_causal_lm(path, model_cfg.gguf_file, model_cfg.trust_remote_code)
    config = _config(model_cfg, path)
    return _random(AutoModelForCausalLM, config, seed, model_cfg.trust_remote_code)


def build_value_model(model_cfg, path: str, seed: int, head_init: str = "normal") -> torch.nn.Module:
    """A critic (causal-LM body + scalar head): from `path`'s weights, or random (`model.init=random`).
    `head_init` (critic.value_head_init) starts a head the weights lack."""
    if model_cfg.init == "pretrained":
        return load_value_model(path, model_cfg.gguf_file, model_cfg.trust_remote_code, head_init=head_init)
    config = _config(model_cfg, path)
    config.num_labels, config.classifier_dropout = 1, 0.0
    model = _random(AutoModelForTokenClassification, config, seed, model_cfg.trust_remote_code)
    init_fresh_value_head(model, head_init)
    return model


def _config(model_cfg, path: str):
    if model_cfg.init not in MODEL_INITS:
        raise ValueError(f"model.init={model_cfg.init!r}: expected one of {list(MODEL_INITS)}")
    return AutoConfig.from_pretrained(path, gguf_file=model_cfg.gguf_file, trust_remote_code=model_cfg.trust_remote_code)


def _random(auto_class, config, seed: int, trust_remote_code: bool) -> torch.nn.Module:
    with _no_init():  # the modules' own init would draw every weight once more, serially
        model = auto_class.from_config(config, dtype=torch.float32, trust_remote_code=trust_remote_code)
    model.tie_weights()  # done by the init skipped above
    init_random_weights(model, seed, std=getattr(config, "initializer_range", 0.02))
    return model


def init_random_weights(model: torch.nn.Module, seed: int, std: float, threads: int | None = None) -> None:
    """Every parameter drawn from its own generator, seeded by (seed, its position in named_parameters):
    the same weights whatever `threads` is. Matrices N(0, std²); 1-D: norms 1, biases 0."""
    params = list(model.named_parameters())  # a tied weight once

    def draw(index: int) -> None:
        name, param = params[index]
        with torch.no_grad():  # per thread: the pool's threads do not inherit the caller's mode
            if param.dim() >= 2:
                param.normal_(0.0, std, generator=torch.Generator().manual_seed(seed * 1_000_003 + index))
            else:
                owner = name.rpartition(".")[0].rpartition(".")[2]  # the module holding it: input_layernorm, q_proj
                param.fill_(1.0 if "norm" in owner.lower() else 0.0)

    with ThreadPoolExecutor(threads or os.cpu_count() or 1) as pool:
        list(pool.map(draw, range(len(params))))


@contextmanager
def _no_init():
    """torch.nn.init's functions and HF's `init_weights` as no-ops: modules get their storage, buffers
    (rotary frequencies) as their constructors compute them, and no draws."""
    originals = {name: getattr(torch.nn.init, name) for name in TORCH_INITS if hasattr(torch.nn.init, name)}
    init_weights = PreTrainedModel.init_weights
    try:
        for name in originals:
            setattr(torch.nn.init, name, lambda tensor, *args, **kwargs: tensor)
        PreTrainedModel.init_weights = lambda self: None
        yield
    finally:
        for name, function in originals.items():
            setattr(torch.nn.init, name, function)
        PreTrainedModel.init_weights = init_weights
