"""One readable line per training step, for the terminal and for CI logs.

    step 12/200 | reward 0.41 | acc 0.38 | kl 0.0012 | 1.9 s/step | ETA 6m04s

MLflow holds every metric; this line shows only the few a person watches to decide whether to
let a run continue. Printed with flush=True so the line appears immediately even when stdout is
a pipe (nohup, CI), and only on rank 0 so an 8-GPU run prints it once, not eight times.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Mapping, Sequence, TextIO

from core.tracking.metrics import as_float

DEFAULT_ACC_KEY = "critic/acc/mean"
STEP_TIME_KEY = "timing_s/step"


def default_keys(acc_key: str = DEFAULT_ACC_KEY) -> dict[str, tuple[str, ...]]:
    """label -> metric keys tried in order; the first present is shown, an absent label skipped."""
    # GRPO with a KL loss reports actor/kl_loss; PPO-style runs without it still have ppo_kl.
    return {
        "reward": ("critic/score/mean",),
        "acc": (acc_key,),
        "kl": ("actor/kl_loss", "actor/ppo_kl"),
        "loss": ("sft/loss",),  # supervised runs (recipezoo sft)
    }


def format_value(value: float) -> str:
    """3 significant digits (0.41, 0.0012, 12.5), without a float's noise digits."""
    if abs(value) >= 1000:
        return f"{value:.1f}"
    return f"{value:.3g}"


def format_duration(seconds: float) -> str:
    """45s, 6m04s, 2h07m: coarse enough to read at a glance."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{(seconds % 3600) // 60:02d}m"


class ConsoleLogger:
    """Prints the step line from a metrics dict; `val/` keys go to a separate validation line.

    `keys` maps a short label to the metric keys to try for it (first present wins), e.g.
    `{"reward": ("critic/score/mean",)}`; by default reward, acc (`acc_key`) and kl.
    """

    def __init__(
        self,
        total_steps: int,
        keys: Mapping[str, str | Sequence[str]] | None = None,
        acc_key: str = DEFAULT_ACC_KEY,
        rank: int = 0,
        stream: TextIO | None = None,
    ):
        self.total_steps = total_steps
        raw_keys = default_keys(acc_key) if keys is None else keys
        self.keys = {
            label: (candidates,) if isinstance(candidates, str) else tuple(candidates)
            for label, candidates in raw_keys.items()
        }
        self.quiet = rank != 0
        self.stream = stream
        self._step_time_sum = 0.0
        self._step_time_count = 0
        self._last_call: float | None = None

    def _print(self, line: str) -> None:
        if not self.quiet:
            # Resolve sys.stdout at print time, so pytest's capsys and redirections see it.
            print(line, file=self.stream or sys.stdout, flush=True)

    def log_metrics(self, metrics: Mapping[str, Any], step: int) -> None:
        """Print the step line, and the validation line when `metrics` has `val/` keys.

        A dict holding only `val/` keys (validation before the first step) prints only the
        validation line, so it does not skew the step-time mean either.
        """
        train_keys = [key for key in metrics if not key.startswith("val/")]
        if train_keys:
            self._print(self.format_step(metrics, step))
        if len(train_keys) < len(metrics):
            self.log_validation(step, metrics)

    def format_step(self, metrics: Mapping[str, Any], step: int) -> str:
        parts = [f"step {step}/{self.total_steps}"]
        for label, candidates in self.keys.items():
            value = next((metrics[k] for k in candidates if k in metrics), None)
            number = as_float(value)
            if number is not None:
                parts.append(f"{label} {format_value(number)}")
        step_time = self._record_step_time(metrics)
        if step_time is not None:
            step_text = f"{step_time:.0f}" if step_time >= 10 else f"{step_time:.2g}"
            parts.append(f"{step_text} s/step")
            mean_time = self._step_time_sum / self._step_time_count
            remaining = max(self.total_steps - step, 0)
            parts.append(f"ETA {format_duration(mean_time * remaining)}")
        return " | ".join(parts)

    def _record_step_time(self, metrics: Mapping[str, Any]) -> float | None:
        """This step's seconds: `timing_s/step` if the trainer timed it, else the wall time
        since the previous call (None on the first call, when there is nothing to measure)."""
        now = time.perf_counter()
        step_time = as_float(metrics.get(STEP_TIME_KEY))
        if step_time is None and self._last_call is not None:
            step_time = now - self._last_call
        self._last_call = now
        if step_time is not None:
            self._step_time_sum += step_time
            self._step_time_count += 1
        return step_time

    def log_validation(self, step: int, metrics: Mapping[str, Any]) -> None:
        """`validation step 12 | val/gsm8k/acc 0.41 | ...`, keys sorted so runs diff cleanly."""
        parts = [f"validation step {step}"]
        for key in sorted(k for k in metrics if k.startswith("val/")):
            number = as_float(metrics[key])
            if number is not None:
                parts.append(f"{key} {format_value(number)}")
        self._print(" | ".join(parts))

    def finish(self, status: str = "FINISHED") -> None:
        if status != "FINISHED":
            self._print(f"run {status}")
