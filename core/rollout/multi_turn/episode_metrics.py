"""What a batch of multi-turn episodes did with its tools, as figures: the trainer logs them per step
(core/trainer/metrics.py) and per validation (core/trainer/validation.py), `recipezoo eval` per data source
(core/eval/evaluate.py)."""

from __future__ import annotations

import numpy as np

from core.rollout.multi_turn.loop import STOP_REASONS

# A multi-turn rollout's per-episode columns that its figures are made from (loop.py, _episode_values).
EPISODE_COLUMNS = ("multi_turn_turns", "multi_turn_stop_reason", "tool_calls", "tool_errors", "tool_timeouts",
                   "template_mismatch")


def multi_turn_metrics(episodes: dict) -> dict[str, float]:
    """A multi-turn rollout's episodes (their `multi_turn_*` and `tool_*` columns): turns, tool calls, errors and
    timeouts per episode, the share of episodes that called a tool, the share that ended for each reason, and the
    wall time the tools took."""
    if "multi_turn_turns" not in episodes:
        return {}
    turns = np.asarray(episodes["multi_turn_turns"], dtype=float)
    calls = np.asarray(episodes["tool_calls"], dtype=float)
    metrics = {
        "multi_turn/num_turns/mean": float(turns.mean()),
        "multi_turn/num_turns/max": float(turns.max()),
        "tool/calls": float(calls.mean()),
        "tool/call_rate": float((calls > 0).mean()),
        "tool/errors": float(np.asarray(episodes["tool_errors"], dtype=float).mean()),
        "tool/timeouts": float(np.asarray(episodes["tool_timeouts"], dtype=float).mean()),
    }
    if "tool_wall_s" in episodes:  # the batch's tool phases, in wall-clock seconds (part of timing_s/gen)
        metrics["timing_s/tool"] = float(np.asarray(episodes["tool_wall_s"], dtype=float).sum())
    reasons = list(episodes["multi_turn_stop_reason"])
    metrics |= {f"multi_turn/stop_reason/{reason}": reasons.count(reason) / len(reasons) for reason in STOP_REASONS}
    if "template_mismatch" in episodes:
        metrics["multi_turn/template_mismatch"] = float(np.asarray(episodes["template_mismatch"], dtype=float).mean())
    return metrics
