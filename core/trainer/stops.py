"""What ends a training run early, on purpose: each carries the one line `recipezoo train` prints and
its exit code, and the MLflow status it leaves follows from its type.

- `Interrupted`: SIGTERM or SIGINT (a scheduler's preemption, `timeout`, Ctrl-C). A KeyboardInterrupt,
  so everything that already lets Ctrl-C through (scorers, pools, trackers: MLflow KILLED) does so for
  SIGTERM too. Exit 128 + the signal's number: 143 for SIGTERM, 130 for SIGINT, as a shell reports it.
- `RunHalted`: the run stopped itself because going on would waste it or lose data (steps that keep
  failing to update, a full disk). MLflow FAILED, exit 1, one line saying why and what to do.
"""

from __future__ import annotations

import signal

EXIT_HALTED = 1


class Interrupted(KeyboardInterrupt):
    def __init__(self, signum: int, detail: str = ""):
        super().__init__(signum)
        self.signum, self.detail = signum, detail

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.signum).name

    def __str__(self) -> str:
        return f"stopped by {self.signal_name}" + (f" {self.detail}" if self.detail else "")


class RunHalted(RuntimeError):
    """The message is the whole report: what happened, at which step, and what to change."""

    exit_code = EXIT_HALTED
