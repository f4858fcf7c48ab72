"""Runaway training stops loudly: what each step's metrics say about the run, checked after it is logged.

- `trainer.max_bad_steps` steps in a row whose update was skipped stop the run. The engine skips an
  optimizer step whose gradient norm is not finite (a NaN/inf loss or reward gives one) and counts it
  in `actor/skipped_steps` (`critic/skipped_steps`); a run whose every update is skipped no longer
  trains, yet would go on saving checkpoints and exit 0.
- Signs of collapse are warned about once each: the policy's entropy near 0 for a few steps (it samples
  one fixed answer: often an lr far too high), and every response cut at `data.max_response_length`.

The metrics are the ones already averaged over ranks, so every rank decides alike and stops together.
"""

from __future__ import annotations

import math

from core.trainer.stops import RunHalted

ENTROPY_FLOOR = 1e-3  # nats per token: a policy this sure samples one answer
STEPS_IN_A_ROW = 3  # how long a collapse sign must last before the warning


class StepGuard:
    def __init__(self, max_bad_steps: int, lr: float, max_response_length: int):
        self.max_bad_steps, self.lr, self.max_response_length = max_bad_steps, lr, max_response_length
        self.bad_in_a_row = 0
        self.sign_streaks = {"entropy": 0, "length": 0}
        self.warned: set[str] = set()

    def check(self, step: int, metrics: dict[str, float]) -> None:
        skipped = metrics.get("actor/skipped_steps", 0) + metrics.get("critic/skipped_steps", 0)
        self.bad_in_a_row = self.bad_in_a_row + 1 if skipped > 0 else 0
        if self.max_bad_steps and self.bad_in_a_row >= self.max_bad_steps:
            raise RunHalted(self._bad_steps_message(step, metrics))
        entropy = metrics.get("actor/entropy", math.inf)
        self._watch(step, "entropy", entropy < ENTROPY_FLOOR,
                    f"the policy's entropy has stayed near 0 (actor/entropy={entropy:.2g}): it samples one fixed "
                    f"answer per prompt and barely learns from there; a too high actor.lr (now {self.lr:g}) "
                    "does this")
        self._watch(step, "length", metrics.get("response_length/clip_ratio", 0.0) >= 1.0,
                    f"every response has reached data.max_response_length={self.max_response_length} tokens: "
                    "answers are cut off before they end; raise data.max_response_length, or check that the "
                    "model ends its answers (its end-of-turn token)")

    def _watch(self, step: int, sign: str, present: bool, message: str) -> None:
        self.sign_streaks[sign] = self.sign_streaks[sign] + 1 if present else 0
        if self.sign_streaks[sign] >= STEPS_IN_A_ROW and sign not in self.warned:
            self.warned.add(sign)
            print(f"warning: step {step}: for {STEPS_IN_A_ROW} steps {message} (warned once)", flush=True)

    def _bad_steps_message(self, step: int, metrics: dict[str, float]) -> str:
        shown = ", ".join(f"{key}={metrics[key]:g}" for key in ("actor/pg_loss", "actor/grad_norm") if key in metrics)
        return (f"stopped at step {step}: {self.bad_in_a_row} steps in a row had a non-finite loss or gradient norm "
                f"({shown}), so their updates were skipped and the policy no longer trains — lower actor.lr (now "
                f"{self.lr:g}) or look for NaN/inf rewards; trainer.max_bad_steps={self.max_bad_steps} sets how "
                "many in a row stop the run (0: never)")
