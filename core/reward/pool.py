"""Process-pool reward manager: scorers run in worker processes under a per-sample time limit.

A scorer that raises scores 0 with its error, as in-process. One that runs past `timeout_s`
scores 0 with a "timeout:" error, and its worker is killed and replaced: a hung Python call
cannot be interrupted from outside (concurrent.futures can only abandon it, leaving the process
busy forever), so this module owns its worker processes and one pipe to each.

Workers are forked from multiprocessing's forkserver: "fork" from a trainer that has torch
threads or CUDA is unsafe, and "spawn" would import torch again in every worker (2 s, 200+ MB
each). The forkserver preloads the scorers, so a replacement worker starts in milliseconds.
"""

from __future__ import annotations

import multiprocessing
import pickle
import signal
import time
import weakref
from collections import deque
from multiprocessing.connection import wait

from core.reward.custom import CustomFunction, load_custom_function
from core.reward.manager import TIMEOUT_ERROR, RewardManager, failed_row, score_row

# '__main__' is the forkserver's default preload; the rest makes worker start-up a plain fork.
_FORKSERVER_PRELOAD = ["__main__", "core.reward.pool", "core.reward.mathverify"]
STARTUP_TIMEOUT_S = 60
_READY = "ready"


class PoolRewardManager(RewardManager):
    """`RewardManager` whose scorers run in `num_workers` processes, `timeout_s` per sample.

    Scorers must be picklable (module-level functions, `functools.partial` of them, or a
    `CustomFunction`). Workers are daemon processes: a scorer may run subprocesses but not
    multiprocessing children. Call `close()` (or use it as a context manager) to stop the workers;
    they are also stopped when the manager is garbage-collected or the interpreter exits.
    """

    def __init__(self, tokenizer, scorers=None, default_scorer=None, custom_scorer=None,
                 num_workers: int = 2, timeout_s: float = 10.0):
        super().__init__(tokenizer, scorers, default_scorer, custom_scorer)
        if num_workers < 1 or timeout_s <= 0:
            raise ValueError(f"PoolRewardManager: reward.num_workers={num_workers} must be >= 1 and "
                             f"reward.timeout_s={timeout_s} must be > 0")
        self.timeout_s = float(timeout_s)
        self._check_picklable()
        self._context = multiprocessing.get_context("forkserver")
        self._context.set_forkserver_preload(_FORKSERVER_PRELOAD)
        self._workers = [self._start_worker() for _ in range(num_workers)]
        # Replacements are written into this same list, so the finalizer always stops the live ones.
        self._finalizer = weakref.finalize(self, _stop_workers, self._workers)
        for worker in self._workers:
            worker.wait_ready()

    def score_texts(self, texts: list[str], data_sources: list[str], ground_truths: list,
                    extra_infos: list | None = None) -> list[dict]:
        if not self._finalizer.alive:
            raise RuntimeError("PoolRewardManager is closed; build a new one to score again")
        extra_infos = extra_infos if extra_infos is not None else [None] * len(texts)
        scorers = [self.scorer_for(source) for source in data_sources]  # unknown source: fail before scoring
        tasks = deque(enumerate(zip(scorers, texts, ground_truths, data_sources, extra_infos)))
        results: list[dict | None] = [None] * len(texts)
        try:
            while tasks or any(worker.row is not None for worker in self._workers):
                self._dispatch(tasks, results)
                self._collect(results)
        except BaseException:
            # Interrupted mid-batch (Ctrl-C): a busy worker's late result would be read as the next
            # batch's, so busy workers are replaced before the error propagates.
            for worker in [w for w in self._workers if w.row is not None]:
                self._replace(worker)
            raise
        return results

    def close(self) -> None:
        """Stop the worker processes (idempotent)."""
        self._finalizer()

    # ---- scheduling -----------------------------------------------------------------------------
    def _dispatch(self, tasks: deque, results: list) -> None:
        """Give each idle worker the next row."""
        for worker in list(self._workers):
            while worker.row is None and tasks:
                row, task = tasks.popleft()
                try:
                    worker.conn.send(task)  # pickles first: on failure nothing was sent
                except OSError:  # the worker died while idle: the row goes to its replacement
                    tasks.appendleft((row, task))
                    self._replace(worker)
                    break
                except Exception as error:  # noqa: BLE001 (e.g. an unpicklable ground truth or extra_info)
                    results[row] = failed_row(f"could not send the row to a worker: {type(error).__name__}: {error}")
                    continue
                worker.row, worker.deadline = row, time.monotonic() + self.timeout_s

    def _collect(self, results: list) -> None:
        """Wait for the first result or deadline; take every finished row, then expire late ones."""
        busy = [worker for worker in self._workers if worker.row is not None]
        if not busy:
            return
        ready = wait([worker.conn for worker in busy], max(0.0, min(w.deadline for w in busy) - time.monotonic()))
        for worker in busy:
            # Read finished results before checking deadlines: a result that arrived in time but
            # was read late (while a replacement started) is still a result.
            if worker.conn in ready:
                try:
                    results[worker.row] = worker.conn.recv()
                    worker.row = None
                except (EOFError, OSError):  # the process died: segfault, os._exit, out of memory
                    worker.process.join(1)
                    results[worker.row] = failed_row(
                        f"worker process died (exit code {worker.process.exitcode}) while scoring; replaced")
                    self._replace(worker)
            elif time.monotonic() >= worker.deadline:
                results[worker.row] = failed_row(
                    f"{TIMEOUT_ERROR} scorer ran over {self.timeout_s:g}s; its worker was killed and replaced")
                self._replace(worker)

    def _replace(self, worker: _Worker) -> None:
        worker.stop(graceful=False)
        fresh = self._start_worker()
        fresh.wait_ready()
        self._workers[self._workers.index(worker)] = fresh

    def _start_worker(self) -> _Worker:
        scorers = {id(s): s for s in [*self.scorers.values(), self.default_scorer, self.custom_scorer] if s is not None}
        return _Worker(self._context, list(scorers.values()))

    def _check_picklable(self) -> None:
        named = [*self.scorers.items(), ("default_scorer", self.default_scorer), ("custom", self.custom_scorer)]
        for source, scorer in named:
            if scorer is None:
                continue
            try:
                pickle.dumps(scorer)
            except Exception as error:
                raise ValueError(
                    f"PoolRewardManager: the scorer for {source!r} ({scorer!r}) cannot be sent to a worker "
                    f"process ({type(error).__name__}: {error}); use a module-level function (not a lambda "
                    f"or closure), reward.custom_function.path/name, or reward.manager=naive"
                ) from error


class _Worker:
    """One worker process, its end of the pipe, and the row it is scoring (None when idle)."""

    def __init__(self, context, scorers: list):
        self.conn, child_conn = context.Pipe()
        self.process = context.Process(target=_worker_main, args=(child_conn, scorers), daemon=True,
                                       name="recipezoo-reward-worker")
        self.process.start()
        child_conn.close()
        self.row: int | None = None
        self.deadline = 0.0

    def wait_ready(self) -> None:
        # The scoring clock starts only once the worker is up, so start-up never counts as a timeout.
        try:
            if self.conn.poll(STARTUP_TIMEOUT_S) and self.conn.recv() == _READY:
                return
        except (EOFError, OSError):
            pass
        self.stop(graceful=False)
        raise RuntimeError(
            f"a reward worker process did not start (exit code {self.process.exitcode}; start-up limit "
            f"{STARTUP_TIMEOUT_S}s); see its traceback above. Check reward.custom_function, make sure the "
            f"launching script guards its entry point with `if __name__ == '__main__':`, or set "
            f"reward.manager=naive"
        )

    def stop(self, graceful: bool = True) -> None:
        if graceful and self.process.is_alive():
            try:
                self.conn.send(None)
                self.process.join(1)
            except (OSError, ValueError):
                pass
        if self.process.is_alive():
            self.process.kill()  # SIGKILL: a scorer stuck in C code (sympy) ignores gentler signals
            self.process.join()
        self.conn.close()


def _worker_main(conn, scorers: list) -> None:
    # Ctrl-C reaches the whole process group; the trainer handles it and stops the workers.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Unpickling `scorers` imported their modules; load custom files too, all before "ready", so a
    # slow import never counts against the first sample's time limit. A file that fails to load
    # here stops the worker, and the manager reports it instead of scoring every row 0.
    for scorer in scorers:
        if isinstance(scorer, CustomFunction):
            load_custom_function(scorer.path, scorer.name)
    conn.send(_READY)
    while True:
        try:
            task = conn.recv()
        except EOFError:  # the manager's process is gone
            return
        if task is None:
            return
        conn.send(score_row(*task))


def _stop_workers(workers: list[_Worker]) -> None:
    for worker in workers:
        worker.stop()
