"""rollout/logprob_diff from the update's own forward, where that forward is π_old (no forward before it)."""

import pytest
import torch

from core.algos.logprob_drift import LogprobDrift
from core.config import load_config
from recipes.grpo.trainer import GRPOTrainer


def test_drift_is_the_token_mean_and_max_over_micro_batches():
    drift = LogprobDrift()
    # micro-batch 1: |Δ| = 0.1, 0.3 on its two response tokens (the third is padding, |Δ| 5 not counted)
    drift.add(torch.tensor([[-1.0, -2.0, -3.0]]), torch.tensor([[-1.1, -1.7, 2.0]]), torch.tensor([[1, 1, 0]]))
    # micro-batch 2: |Δ| = 0.6 on one token; its other row is all padding
    drift.add(torch.tensor([[-0.5, 0.0], [0.0, 0.0]]), torch.tensor([[-1.1, 9.0], [9.0, 9.0]]),
              torch.tensor([[1, 0], [0, 0]]))
    metrics = drift.pop()
    assert metrics["rollout/logprob_diff/mean"] == pytest.approx((0.1 + 0.3 + 0.6) / 3)
    assert metrics["rollout/logprob_diff/max"] == pytest.approx(0.6)
    assert drift.pop() == {}  # popped: the next update starts afresh


def test_a_micro_batch_of_padding_only_adds_nothing():
    drift = LogprobDrift()
    drift.add(torch.zeros(2, 3), torch.ones(2, 3), torch.zeros(2, 3))
    assert drift.pop() == {}


def _logged(overrides) -> dict:
    trainer = GRPOTrainer(load_config("grpo", overrides))
    logged = {}
    original = trainer.tracking.log_metrics
    trainer.tracking.log_metrics = lambda metrics, step: logged.update(metrics) or original(metrics, step=step)
    trainer.fit()
    return logged


def test_the_fast_path_logs_the_same_drift_as_a_forward_before_the_update(fast_overrides):
    """One optimizer step per rollout: no π_old forward, so the drift comes from the update's forward; recomputing
    π_old first (actor.recompute_old_log_probs=always) logs it from that forward: the same numbers (CPU, fp32)."""
    single = fast_overrides + ["actor.ppo_mini_batch_size=4"]
    skipped = _logged(single)
    recomputed = _logged(single + ["actor.recompute_old_log_probs=always"])
    for key in ("rollout/logprob_diff/mean", "rollout/logprob_diff/max"):
        assert key in skipped and key in recomputed, key
        assert skipped[key] == pytest.approx(recomputed[key], rel=1e-4, abs=1e-6), key
    assert skipped["rollout/logprob_diff/max"] >= skipped["rollout/logprob_diff/mean"] >= 0


def test_no_drift_is_logged_without_the_engines_log_probs(fast_overrides):
    logged = _logged(fast_overrides + ["actor.ppo_mini_batch_size=4", "rollout.calculate_log_probs=false"])
    assert "rollout/logprob_diff/mean" not in logged
