"""Load a reward model: a transformer body with a scalar head (`score`), read at a response's last token.

Two kinds of checkpoint hold one: a sequence-classification model with one label (TRL's and OpenRLHF's reward
models, and what `recipezoo rm` writes), and a critic-style token-classification model with one label (the
critic's value head). Both keep the head as `score` beside the body, so both load as
`AutoModelForSequenceClassification`; the engine reads the head's output at the last token itself
(core/engine/reward_head.py), not through HF's pooling, which finds that token by the pad id and misreads rows
whose pad token is their EOS.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForSequenceClassification

from core.config import ConfigError
from core.models.loading import EMBEDDED_PREFIX, HUB_ID, PYPI_PREFIX, check_model_files, init_fresh_value_head

SCALAR_HEAD_KEYS = ("score.",)  # the head's weights: `score.weight` (and a bias on some architectures)


def check_scalar_head(path: str, key: str = "reward.model.path") -> None:
    """From config.json alone (no weights read): the model's head must have one output. A hub id is left to
    the load, which checks the same."""
    if path.startswith((EMBEDDED_PREFIX, PYPI_PREFIX)):
        return  # built or downloaded by the run: causal LMs, which the load refuses as having no trained head
    config_file = Path(path).expanduser() / "config.json"
    if not config_file.is_file():
        if HUB_ID.fullmatch(path) and not Path(path).expanduser().exists():
            return
        check_model_files(path, weights=True)  # names what the dir lacks
        return
    config = json.loads(config_file.read_text())
    architectures = config.get("architectures") or []
    if architectures and all(name.endswith("ForCausalLM") for name in architectures):
        raise ConfigError(f"{key}={path!r} is a language model ({architectures[0]}), not a reward model: it has no "
                          "scalar head. Train a reward model from it with `recipezoo rm`")
    labels = _num_labels(config)
    if labels != 1:
        raise ConfigError(f"{key}={path!r}: its head has {labels} outputs (config.json num_labels/id2label); a reward "
                          "model has one scalar head (num_labels=1). Train one with `recipezoo rm`, or give a "
                          "sequence-classification model with one label")


def load_reward_model(path: str, trust_remote_code: bool = False, *, fresh_head: bool = False,
                      dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    """fp32 master weights of a scalar-head model. `fresh_head` (training a reward model from a causal LM): a
    head the checkpoint lacks starts at zero, so every response first scores 0; otherwise a missing head is an
    error, since a random head would score noise."""
    check_model_files(path, weights=True)
    config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
    if not fresh_head and _num_labels(config.to_dict()) != 1:
        check_scalar_head(path)
    config.num_labels = 1
    config.id2label, config.label2id = {0: "score"}, {"score": 0}
    model, info = AutoModelForSequenceClassification.from_pretrained(
        path, config=config, dtype=dtype, trust_remote_code=trust_remote_code, output_loading_info=True)
    if not hasattr(model, "score"):
        raise ConfigError(f"{path}: {type(model).__name__} has no `score` head; a reward model needs a "
                          "sequence-classification class whose scalar head is named score (Llama, Qwen, Mistral, ...)")
    missing_head = any(name.startswith(SCALAR_HEAD_KEYS) for name in info["missing_keys"])
    if missing_head and not fresh_head:
        raise ConfigError(f"reward.model.path={path!r} holds no trained head (no score.weight in its weights): it is "
                          "a plain language model. Train a reward model from it with `recipezoo rm`")
    if missing_head:
        init_fresh_value_head(model, "zeros")
    model.config.architectures = [type(model).__name__]  # a causal LM's config still names its own class
    return model


def _num_labels(config: dict) -> int:
    """HF's rule: `id2label`'s size when present, else `num_labels`, else 2 (PretrainedConfig's default)."""
    if config.get("id2label"):
        return len(config["id2label"])
    return int(config.get("num_labels", 2))
