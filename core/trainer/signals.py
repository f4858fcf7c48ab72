"""SIGTERM and SIGINT during a run: a graceful stop at a step boundary instead of a lost step.

Outside the training loop (config checks, building the model) a signal raises `Interrupted` at once:
nothing is trained yet, and the `with`/`finally` blocks on the way out release the output dir's lock
and close the MLflow run as KILLED. Inside `fit`'s loop (`deferred_stop`) the first signal is only
recorded: the step in flight finishes, then at the step boundary every rank agrees to stop
(`StopRequest.agreed`, an all-reduce: torchrun's ranks receive the signal at different moments, and
must all stop after the same step), and the trainer saves and raises `Interrupted`. A second signal
stops at once, abandoning the step in flight (the last checkpoint stays intact: saves are atomic).

One Ctrl-C in a terminal reaches torchrun and its ranks, and torchrun then forwards it to the ranks
again: a repeat of the same signal within `REPEAT_WINDOW_S` is the same request, not a second one.
Handlers can only be set from the main thread; elsewhere (a `fit` in a thread) signals keep their
default handling.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from contextlib import contextmanager
from typing import Callable

import torch
import torch.distributed as dist

from core.engine.distributed import World
from core.trainer.stops import Interrupted

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
REPEAT_WINDOW_S = 3.0


class StopRequest:
    """The stop signal this process received while the training loop runs, if any."""

    def __init__(self):
        self.signum: int | None = None
        self.received_at = 0.0
        self.deferring = False

    def handle(self, signum: int, frame) -> None:
        repeat = signum == self.signum and time.monotonic() - self.received_at < REPEAT_WINDOW_S
        if self.deferring and (self.signum is None or repeat):
            if self.signum is None:
                self.signum, self.received_at = signum, time.monotonic()
                if os.environ.get("RANK", "0") == "0":
                    print(f"received {signal.Signals(signum).name}: stopping after the step in flight "
                          "(send it again to stop at once)", flush=True)
            return
        raise Interrupted(signum)

    def agreed(self, world: World) -> int | None:
        """The signal to stop on, the same on every rank (a collective under torchrun); None: go on."""
        signum = self.signum or 0
        if world.size > 1:
            flag = torch.tensor([signum], dtype=torch.int64, device=world.device)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            signum = int(flag.item())
        return signum or None


REQUEST = StopRequest()  # one per process: signal handlers are per process too


@contextmanager
def interruptible():
    """SIGTERM and SIGINT raise `Interrupted` for the `with` block (in the main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, REQUEST.handle) for signum in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextmanager
def deferred_stop(describe: Callable[[], str]):
    """The training loop's block: a first signal waits for the step boundary (`REQUEST.agreed`). An
    `Interrupted` raised at once (a second signal) gets `describe()` as its detail: where it stopped."""
    with interruptible():
        REQUEST.signum, REQUEST.deferring = None, True
        try:
            yield REQUEST
        except Interrupted as stop:
            stop.detail = stop.detail or describe()
            raise
        finally:
            REQUEST.deferring = False
