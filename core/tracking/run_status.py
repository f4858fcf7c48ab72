"""How a run ends when the `with` block that holds it is left, for every tracking backend alike (its own module:
tracker.py imports the MLflow backend, which needs this too)."""

from __future__ import annotations


def exit_status(exc_type: type[BaseException] | None) -> str:
    """The status a run ends with when its `with` block is left: FINISHED, KILLED for Ctrl-C, else FAILED."""
    if exc_type is None:
        return "FINISHED"
    return "KILLED" if issubclass(exc_type, KeyboardInterrupt) else "FAILED"
