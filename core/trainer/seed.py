"""The run's seed, below setup and every controller: the driver, each torchrun rank and each Ray
worker seed the same way, so every rank builds identical weights."""

from __future__ import annotations

import random

import numpy as np
import torch


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
