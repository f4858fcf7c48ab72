"""What every trainer's run shares, whatever its step: checkpoints, resume, stopping on a signal, the first
validation, the step bookkeeping, and the loop of a run whose step is one update (`fit`: SFT, the reward
model). `BaseTrainer` (the RL loop, with stages of its own) and `SFTTrainer` are subclasses; each supplies its step
and a few hooks:

    train_one_step(step)   the step itself, its metrics logged (`fit`'s runs; BaseTrainer has its own loop)
    finish_training(val)   what ends `fit` once every step is done (the reward model: its export)
    checkpoint_engines()   role -> engine a checkpoint holds
    loader_state()         the data position a checkpoint stores (RL's schedule may hold prompts drawn ahead)
    after_resume()         what the loaded weights must reach (RL: its rollout engine)
    validate(step)         held-out metrics (RL: generate and score; SFT: the held-out loss)
    write_timeline()       the per-step spans a stopped run keeps (RL's timeline)
"""

from __future__ import annotations

import time
from pathlib import Path

from omegaconf import OmegaConf

from core.tracking.metrics import timed
from core.trainer.checkpoint import CheckpointManager, list_checkpoints
from core.trainer.checkpoint_export import write_hf_files
from core.trainer.guards import StepGuard
from core.trainer.signals import StopRequest, deferred_stop
from core.trainer.start_record import PREFIX as START_PREFIX
from core.trainer.start_record import start_line, start_phase
from core.trainer.stops import Interrupted


class TrainingRun:
    RESUME_FLAG = "trainer.resume"  # how the user asks for a resume, as the hints below name it
    MORE_STEPS_HINT = "raise trainer.total_steps"

    def __init__(self, config, parts, started: float):
        """`parts`: the built world, tokenizer, train_loader, tracking, resume_from and start_record
        (core/trainer/setup.py)."""
        self.config, self.started = config, started
        self.world, self.tokenizer, self.train_loader = parts.world, parts.tokenizer, parts.train_loader
        self.tracking = parts.tracking
        self.resume_from = parts.resume_from
        self.start_record = parts.start_record  # logged with the first step's metrics (start_record.py)
        self.checkpoints = CheckpointManager(config.trainer.checkpoint_dir, self.world,
                                             keep_last=config.trainer.max_ckpt_to_keep)
        self.last_saved: tuple[int, Path] | None = None  # (step, dir) of this run's newest checkpoint
        self.guard = StepGuard(config.trainer.max_bad_steps, config.actor.lr, config.data.max_response_length)
        self.timings: dict[str, float] = {}
        self.step_metrics: dict[str, float] = {}  # what a step's methods report besides their outputs
        self.val_history: list[tuple[int, dict[str, float]]] = []
        self.global_step = 0  # the step `fit` is in (1-based), for steps that depend on it

    # ---- the loop ----------------------------------------------------------------------------
    def fit(self) -> dict[str, float]:
        """Resume (or validate at step 0), then each step with validation every `trainer.test_freq` and a
        checkpoint every `trainer.save_freq` and at the last step; a SIGTERM/SIGINT stops it at a step boundary,
        saved first (signals.py). Returns the last validation's metrics, as `finish_training` leaves them."""
        total, save_freq = self.config.trainer.total_steps, self.config.trainer.save_freq
        with self.tracking, deferred_stop(self.where_stopped) as stop_request:
            first_step, val_metrics = self.before_first_step()
            for step in range(first_step, total + 1):
                self.stop_if_signalled(stop_request, last_step=step - 1)
                self.global_step, self.timings, self.step_metrics = step, {}, {}
                self.train_one_step(step)
                if self._due(step, self.config.trainer.test_freq, total):
                    val_metrics = self.validate(step)
                if self._due(step, save_freq, total):
                    self.save_checkpoint(step)
            self.stop_if_signalled(stop_request, last_step=total)
            return self.finish_training(val_metrics)

    # ---- hooks --------------------------------------------------------------------------------
    def train_one_step(self, step: int) -> None:
        raise NotImplementedError

    def finish_training(self, val_metrics: dict[str, float]) -> dict[str, float]:
        return val_metrics

    def checkpoint_engines(self) -> dict:
        raise NotImplementedError

    def loader_state(self) -> dict:
        return self.train_loader.state_dict()

    def after_resume(self) -> None:
        pass

    def validate(self, step: int) -> dict[str, float]:
        return {}

    def write_timeline(self) -> None:
        pass

    # ---- the first step -----------------------------------------------------------------------
    def before_first_step(self) -> tuple[int, dict[str, float]]:
        """Resume from `trainer.resume`'s checkpoint, or validate a fresh run at step 0 (unless
        `trainer.val_before_train=false`); then print the start record. Returns the first step to run and the
        validation metrics."""
        with start_phase("resume", self.start_record):
            first_step = self.resume() + 1
        val_metrics = {}
        if first_step == 1 and self.config.trainer.test_freq and self.config.trainer.val_before_train:
            with start_phase("first_validation", self.start_record):
                val_metrics = self.validate(step=0)
        self.start_record[START_PREFIX + "total"] = time.perf_counter() - self.started
        if self.world.rank == 0:
            print(start_line(self.start_record), flush=True)
        return first_step, val_metrics

    # ---- checkpoints --------------------------------------------------------------------------
    def save_checkpoint(self, step: int) -> None:
        engines = self.checkpoint_engines()
        state = {"loader": self.loader_state(), "val_history": self.val_history,
                 "mlflow_run_id": self.tracking.run_id, "config": OmegaConf.to_container(self.config, resolve=True)}
        hf_files = {role: (lambda out, e=engine: write_hf_files(e.model, self.tokenizer, out))
                    for role, engine in engines.items()}
        with timed("save_checkpoint", self.timings):
            path = self.checkpoints.save(step, engines, state, hf_files)
        self.last_saved = (step, path)
        if self.world.is_main:
            print(f"saved checkpoint {path} in {self.timings['timing_s/save_checkpoint']:.1f} s", flush=True)

    def resume(self) -> int:
        """Load `trainer.resume`'s checkpoint (weights, optimizer, schedule, RNG, data position);
        returns its step, 0 for a fresh run."""
        if self.resume_from is None:
            self._note_existing_checkpoints()
            return 0
        state = self.checkpoints.load(self.resume_from, self.checkpoint_engines())
        self.train_loader.load_state_dict(state["loader"])
        self.val_history = [tuple(entry) for entry in state["val_history"]]
        self.after_resume()
        self.last_saved = (state["step"], self.resume_from)
        if self.world.is_main:
            left = self.config.trainer.total_steps - state["step"]
            print(f"resumed from {self.resume_from} at step {state['step']}; "
                  + (f"{left} steps to go" if left > 0 else f"nothing left to train ({self.MORE_STEPS_HINT})"),
                  flush=True)
        return state["step"]

    def _note_existing_checkpoints(self) -> None:
        existing = list_checkpoints(self.checkpoints.root)
        if existing and self.world.is_main and self.config.trainer.save_freq:
            print(f"note: {self.checkpoints.root} holds checkpoints of an earlier run (up to step "
                  f"{existing[-1][0]}); this run starts fresh ({self.RESUME_FLAG}=disable) and its saves replace "
                  f"them. Use {self.RESUME_FLAG}=auto to continue that run instead.", flush=True)

    # ---- stopping on a signal -----------------------------------------------------------------
    def stop_if_signalled(self, request: StopRequest, last_step: int) -> None:
        """At a step boundary, on every rank at once: a SIGTERM/SIGINT received during the step ends the
        run here, after writing its timeline and saving the steps trained since the last checkpoint
        (`trainer.save_on_signal`)."""
        signum = request.agreed(self.world)
        if signum is None:
            return
        if last_step == 0:
            raise Interrupted(signum, "before step 1; nothing was trained")
        # The steps made keep their spans (a time-limited benchmark reads them): first, before a save that may
        # outlast the caller's patience. Every rank is here together, which the write's gather needs.
        self.write_timeline()
        trainer, saved_step = self.config.trainer, self.last_saved[0] if self.last_saved else 0
        if trainer.save_on_signal and trainer.save_freq and saved_step < last_step:
            self.save_checkpoint(last_step)
        raise Interrupted(signum, f"after step {last_step} of {trainer.total_steps}; {self.checkpoint_note(last_step)}")

    def where_stopped(self) -> str:
        """For a stop that could not wait for the step boundary (a second signal)."""
        return f"during step {self.global_step}, which was abandoned; {self.checkpoint_note(self.global_step)}"

    def checkpoint_note(self, step: int) -> str:
        """Where a stopped run can continue from."""
        if self.last_saved is not None:
            saved_step, path = self.last_saved
            what = f"step {step} is saved in {path}" if saved_step == step else \
                f"the latest checkpoint is {path} (step {saved_step})"
            return f"{what} — continue with {self.RESUME_FLAG}=auto"
        trainer = self.config.trainer
        if trainer.save_freq and trainer.save_on_signal:
            return "no checkpoint saved yet"
        return f"no checkpoint saved ({'trainer.save_on_signal=false' if trainer.save_freq else 'trainer.save_freq=0'})"

    @staticmethod
    def _due(step: int, freq: int, total: int) -> bool:
        return bool(freq) and (step % freq == 0 or step == total)
