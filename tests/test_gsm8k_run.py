"""bench/leaderboard/job.py, one leaderboard job: GPU turns (an engine starts while nothing else on its GPU moves), the
time budget (a clean stop: FINISHED, validated, no `run FAILED`), every sampled token counted. The driver around it
is in tests/test_gsm8k_driver.py.
"""

from __future__ import annotations

import io
import threading
import time
from types import SimpleNamespace

import pytest
import torch
from omegaconf import OmegaConf

from bench.leaderboard import driver  # noqa: E402
from bench.leaderboard import job as worker  # noqa: E402
from core.config import load_config
from core.tracking.console import ConsoleLogger
from core.tracking.tracker import Tracking
from core.trainer.base import BaseTrainer


def test_a_start_waits_for_the_step_in_flight_and_the_next_step_for_the_start(tmp_path):
    stepping, starting = worker.GpuTurns(str(tmp_path / "gpu0")), worker.GpuTurns(str(tmp_path / "gpu0"))
    events = []
    stepping.enter_step()  # a training step in flight

    def start():
        with starting.exclusive():
            events.append("start")
            time.sleep(0.2)
            events.append("started")

    thread = threading.Thread(target=start)
    thread.start()
    time.sleep(0.3)
    events.append("step done")
    stepping.enter_step()  # the next step queues behind the waiting start
    events.append("next step")
    thread.join()
    stepping.leave()
    assert events == ["step done", "start", "started", "next step"]


def test_a_start_whose_kv_cache_is_sized_goes_beside_the_step_in_flight(tmp_path):
    stepping, starting = worker.GpuTurns(str(tmp_path / "gpu0")), worker.GpuTurns(str(tmp_path / "gpu0"))
    events = []
    stepping.enter_step()  # a training step in flight

    def start():
        with starting.starting(kv_cache_sized=True):
            events.append("started")

    thread = threading.Thread(target=start)
    thread.start()
    thread.join(timeout=5)
    events.append("step done")
    stepping.leave()
    starting.leave()
    assert events == ["started", "step done"]


def test_engine_kv_gib_gives_each_engine_its_kv_cache_and_lets_the_starts_overlap(tmp_path):
    from core.rollout.placement import EnginePlacement
    from core.rollout.vllm import engine_kwargs

    args = driver.parse_args(["--engine-kv-gib", "1.5"])
    config = load_config("grpo", driver.run_overrides(args, tmp_path / "data", "file:///store", 2048))
    assert worker.kv_cache_sized(config)
    kwargs = engine_kwargs("m", config.rollout, EnginePlacement(0, 1, 1), dtype="bfloat16", seed=0, max_model_len=2048,
                           dummy_weights=False, cuda=True)
    assert kwargs["kv_cache_memory_bytes"] == 3 * 2**29
    plain = load_config("grpo", driver.run_overrides(driver.parse_args([]), tmp_path / "data", "file:///store", 2048))
    assert not worker.kv_cache_sized(plain)
    with pytest.raises(SystemExit):
        driver.parse_args(["--engine-kv-gib", "0"])


class LoopTrainer:
    """What LeaderboardTrainer hooks in BaseTrainer.fit: generate, validate, log_step and the tracking."""

    _due = staticmethod(BaseTrainer._due)

    def __init__(self, config):
        self.config, self.console = config, io.StringIO()
        self.tracking = Tracking([ConsoleLogger(config.trainer.total_steps, stream=self.console)])
        self.actor_rollout = SimpleNamespace(generate=lambda prompts, params: {"response_mask": torch.ones(2, 3)})
        self.timings, self.logged, self.validated = {}, [], []

    def fit(self):
        total = self.config.trainer.total_steps
        with self.tracking:
            self.validate(0)
            for step in range(1, total + 1):
                self.timings = {"timing_s/step": 0.5}
                self.generate(None)
                self.actor_rollout.generate(None, None)  # a second rollout in the step, as ReMax's greedy one
                self.log_step(step, None, {})
                if self._due(step, self.config.trainer.test_freq, total):
                    self.validate(step)

    def generate(self, prompts, params=None):  # BaseTrainer.generate's signature
        return self.actor_rollout.generate(prompts, params)

    def validate(self, step):
        self.actor_rollout.generate(None, None)
        self.validated.append(step)

    def log_step(self, step, batch, metrics):
        self.logged.append((step, metrics))


def test_the_budget_stops_cleanly_after_a_validated_step_and_every_sampled_token_counts(tmp_path, monkeypatch):
    config = OmegaConf.create({"trainer": {"total_steps": 4, "test_freq": 2}})
    trainer_cls = worker.leaderboard_trainer(LoopTrainer, worker.GpuTurns(str(tmp_path / "gpu0")))
    unlimited = trainer_cls(config)
    unlimited.fit()
    assert [metrics[worker.SAMPLED_TOKENS_KEY] for _, metrics in unlimited.logged] == [12] * 4  # 2 rollouts × 6
    assert unlimited.validated == [0, 2, 4] and unlimited.step_seconds == [0.5] * 4

    late = trainer_cls(config)
    late.deadline = time.monotonic() - 1  # the next step would end past it
    with pytest.raises(worker.StopTraining) as stop:
        late.fit()
    assert stop.value.args == (1,) and late.validated == [0, 1]  # the last step made is validated
    assert "FAILED" not in late.console.getvalue() and late.tracking.backends[0].total_steps == 4
    clock = [0.0]  # each rollout takes 0.25 s on this clock: validation 0.25, a step 0.5
    monkeypatch.setattr(worker.time, "monotonic", lambda: clock[0])
    due = trainer_cls(config)
    due.actor_rollout.generate = lambda prompts, params: clock.__setitem__(0, clock[0] + 0.25) or {
        "response_mask": torch.ones(2, 3)}
    due.deadline = 1.5  # step 2 (due for validation) ends at 1.25; a third would end past 1.5
    with pytest.raises(worker.StopTraining) as stop:
        due.fit()
    assert stop.value.args == (2,) and due.validated == [0, 2]


def test_budget_keeps_the_evaluation_reserve(monkeypatch):
    monkeypatch.setattr(worker.time, "time", lambda: 1000.0)
    assert worker.budget_seconds(None, 120) is None
    assert worker.budget_seconds(1500, 120) == 380
