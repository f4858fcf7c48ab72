"""Models built from `model.path`'s config.json with random weights (`model.init=random`).

Speed and memory depend on the architecture, not on trained weights, so a scale run needs only a
config dir (config.json + tokenizer files): no download of 16 GB of weights. Every role that loads
"the policy" (actor, reference, an HF rollout copy) must start from the same weights, as it would
from a checkpoint, so each build re-seeds the generator with the run's seed before initialising.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForTokenClassification

from core.models.loading import load_causal_lm, load_value_model

MODEL_INITS = ("pretrained", "random")


def build_causal_lm(model_cfg, path: str, seed: int) -> torch.nn.Module:
    """The policy in fp32 master weights: `model.path`'s weights, or random ones (`model.init=random`)."""
    if model_cfg.init == "pretrained":
        return load_causal_lm(path, model_cfg.gguf_file, model_cfg.trust_remote_code)
    config = _config(model_cfg, path)
    with _seeded(seed):
        return AutoModelForCausalLM.from_config(config, dtype=torch.float32,
                                                trust_remote_code=model_cfg.trust_remote_code)


def build_value_model(model_cfg, path: str, seed: int) -> torch.nn.Module:
    """A critic (causal-LM body + scalar head): from `path`'s weights, or random (`model.init=random`)."""
    if model_cfg.init == "pretrained":
        return load_value_model(path, model_cfg.gguf_file, model_cfg.trust_remote_code)
    config = _config(model_cfg, path)
    config.num_labels, config.classifier_dropout = 1, 0.0
    with _seeded(seed):
        return AutoModelForTokenClassification.from_config(config, dtype=torch.float32,
                                                           trust_remote_code=model_cfg.trust_remote_code)


def _config(model_cfg, path: str):
    if model_cfg.init not in MODEL_INITS:
        raise ValueError(f"model.init={model_cfg.init!r}: expected one of {list(MODEL_INITS)}")
    return AutoConfig.from_pretrained(path, gguf_file=model_cfg.gguf_file, trust_remote_code=model_cfg.trust_remote_code)


@contextmanager
def _seeded(seed: int):
    """Seed torch's generator for one build and restore the caller's state after it, so building a
    second copy neither changes the weights nor shifts the run's later random draws."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield
