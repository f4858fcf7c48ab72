"""One step's batch in a file: what `trainer.save_batch_step` writes and bench/verl/numerics.py reads, so that another
framework's old log-probs, advantages and loss can be computed on the very rollout ours trained on.

The file is a torch.save'd dict of plain tensors (loadable with `weights_only=True`): `input_ids`, `attention_mask`,
`position_ids` (B, L) of left-padded prompts and right-padded responses, `responses`, `response_mask`,
`token_level_rewards` (B, T_resp), the engine's `rollout_log_probs` and the trainer's `old_log_probs` (B, T_resp)
where the step had them, and `uid` (B,): each response's prompt group, as strings.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from core.batch import Batch

REQUIRED_KEYS = ("input_ids", "attention_mask", "position_ids", "responses", "response_mask", "token_level_rewards")
OPTIONAL_KEYS = ("rollout_log_probs", "old_log_probs")


def save_batch(batch: Batch, path: Path) -> Path:
    """Write `batch`'s comparison keys to `path` (its parent made if missing); returns `path`."""
    tensors = {key: batch[key].detach().cpu() for key in (*REQUIRED_KEYS, *OPTIONAL_KEYS) if key in batch.tensors}
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({**tensors, "uid": [str(uid) for uid in batch.non_tensors["uid"]]}, path)
    return path


def load_batch(path: Path) -> Batch:
    saved = torch.load(path, weights_only=True)
    missing = [key for key in (*REQUIRED_KEYS, "uid") if key not in saved]
    if missing:
        raise ValueError(f"{path} lacks {missing}: write it with trainer.save_batch_step (core/data/batch_file.py)")
    uid = saved.pop("uid")
    return Batch(tensors=saved, non_tensors={"uid": np.array(uid, dtype=object)})


def load_batch_argument(parser: argparse.ArgumentParser, path: str) -> Batch:
    """`load_batch` for a command line's --batch: a missing or foreign file is the parser's one-line error."""
    try:
        return load_batch(Path(path))
    except (OSError, ValueError) as error:
        parser.error(f"--batch {path}: {error}")
