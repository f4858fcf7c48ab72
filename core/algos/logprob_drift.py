"""|rollout − training| log-probs of the sampled tokens, gathered across an update's micro-batches.

The trainer logs `rollout/logprob_diff/{mean,max}` where it runs a π_old forward before the update
(core/trainer/metrics.py). When one optimizer step covers the batch it skips that forward: the update's own
first forward is π_old (BaseTrainer.old_log_probs_from_update). This tracker takes the same statistics from
that forward, micro-batch by micro-batch, so the engine/trainer drift stays watched on the fast path too.
Sums stay on the device until `pop`, so tracking adds no host sync per micro-batch.
"""

from __future__ import annotations

import torch


class LogprobDrift:
    """Running sum, count and max of |log_probs − rollout_log_probs| over response tokens."""

    def __init__(self):
        self._sum = self._count = self._max = None

    def add(self, log_probs: torch.Tensor, rollout_log_probs: torch.Tensor, response_mask: torch.Tensor) -> None:
        """One micro-batch: (B, T_resp) training log-probs (π_old), the engine's, and the response mask."""
        diff = (log_probs.detach().float() - rollout_log_probs.to(log_probs.device).float()).abs()
        diff = diff[response_mask.to(log_probs.device).bool()]
        if diff.numel() == 0:
            return
        total, count, largest = diff.sum(), torch.tensor(diff.numel(), device=diff.device), diff.max()
        if self._sum is None:
            self._sum, self._count, self._max = total, count, largest
        else:
            self._sum, self._count = self._sum + total, self._count + count
            self._max = torch.maximum(self._max, largest)

    def pop(self) -> dict[str, float]:
        """The metrics since the last pop ({} when no token was added), then a fresh start."""
        if self._sum is None:
            return {}
        metrics = {"rollout/logprob_diff/mean": (self._sum / self._count).item(),
                   "rollout/logprob_diff/max": self._max.item()}
        self._sum = self._count = self._max = None
        return metrics
