"""`trainer.placement=disaggregated`: the rollout engines in Ray actors of their own, each on a device of its
own (a GPU, or a CPU slot on a CPU-only cluster), and the training ranks in others.

After every update, training rank 0 streams the weights to the rollout workers over a process group that
spans it and them (`core.trainer.weight_stream`: NCCL between GPUs, gloo on CPU), at an address the controller
hands out; each worker loads them into its engine (HF: `load_state_dict`; vLLM: its weight reload). With
`trainer.schedule=one_step_off` or `async`, the rollout workers generate step k+1's batch while the training
ranks update on step k's: the schedule's background thread calls `generate` here, the main thread the
training ranks. Under `sync` the two pools take turns.
"""

from __future__ import annotations

import time

import ray
import torch
from omegaconf import OmegaConf

from core.batch import Batch
from core.models.loading import load_tokenizer
from core.models.random_init import build_causal_lm
from core.rollout.base import SamplingParams, concat_rollouts, generate_rollout
from core.rollout.build import build_rollout
from core.trainer.ray_controller import (
    ACTOR,
    WORKER_RUNTIME_ENV,
    RayWorkerGroup,
    contiguous_parts,
    kill_and_wait,
    rank_seeded,
)
from core.trainer.start_record import start_phase
from core.trainer.weight_stream import WeightGroup

ROLLOUT = "rollout"


@ray.remote
class RolloutWorker:
    """One rollout engine (`rollout.name`) on this actor's device, fed by the trainer's weight stream."""

    def setup(self, config_container: dict, model_path: str, device: str) -> tuple[tuple[float, float], dict]:
        """Returns when it ran (epoch seconds, began and ended) and its start phases, as `RankWorker.setup`."""
        began, record = time.time(), {}
        config = OmegaConf.create(config_container)
        torch.set_num_threads(config.trainer.num_threads or 1)  # Ray gives each worker its CPUs
        self.device = torch.device(device)  # Ray shows the actor its one GPU as cuda:0
        tokenizer = load_tokenizer(model_path, config.model.gguf_file, config.model.trust_remote_code)
        with start_phase("rollout_engine", record):
            self.rollout = build_rollout(config, model_path, tokenizer, lambda: build_causal_lm(
                config.model, model_path, seed=config.trainer.seed).to(self.device))
        return (began, time.time()), record

    def join_weight_group(self, address: tuple[str, int], rank: int, size: int) -> None:
        self.weight_group = WeightGroup(address, rank, size, self.device)

    def receive_weights(self) -> None:
        self.rollout.load_weights(self.weight_group.receive())

    def generate(self, prompts: Batch, params: SamplingParams) -> Batch:
        return generate_rollout(self.rollout, prompts, params)


class DisaggregatedGroup(RayWorkerGroup):
    """`RayWorkerGroup`'s interface, its training ranks without engines, and `trainer.rollout_workers`
    rollout workers beside them that `generate` splits the prompts over."""

    def __init__(self, config, model_path: str, tokenizer, *, with_reference: bool, with_critic: bool,
                 num_workers: int):
        self.rollout_workers = []
        super().__init__(config, model_path, tokenizer, with_reference=with_reference, with_critic=with_critic,
                         num_workers=num_workers, with_rollout=False)
        try:
            self._join_weight_stream()
        except BaseException:
            self.close()  # no actor outlives a group that failed to start
            raise

    def start_beside(self, config_container: dict, model_path: str) -> dict[str, tuple[list, tuple]]:
        """The rollout workers start their engines while the training ranks load their models."""
        count = self.sizes[ROLLOUT] = config_container["trainer"]["rollout_workers"]
        options = dict(num_cpus=1, num_gpus=self.gpus, runtime_env=WORKER_RUNTIME_ENV)
        self.rollout_workers = [RolloutWorker.options(**options).remote() for _ in range(count)]
        return {ROLLOUT: (self.rollout_workers, (config_container, model_path, "cuda" if self.gpus else "cpu"))}

    def _join_weight_stream(self) -> None:
        # Training rank 0 serves the rendezvous of the weight stream's group: rank 0 there, worker r rank r + 1.
        count = len(self.rollout_workers)
        with start_phase("weight_group", self.start_record):
            address = self._gather(ACTOR, [self.workers[0].address.remote()])[0]
            self.gather_roles({ACTOR: [self.workers[0].call.remote(ACTOR, "join_weight_group", address, count + 1)],
                               ROLLOUT: [w.join_weight_group.remote(address, rank + 1, count + 1)
                                         for rank, w in enumerate(self.rollout_workers)]})
        with start_phase("first_sync", self.start_record):
            self.sync_weights()  # the engines start from the trainer's weights, whatever they loaded

    @property
    def num_devices(self) -> int:
        return self.num_workers + len(self.rollout_workers)

    def generate(self, prompts: Batch, params: SamplingParams) -> Batch:
        """Contiguous parts of the prompts, one per rollout worker; worker r samples with seed + r."""
        workers = self.live_workers(ROLLOUT)
        parts = contiguous_parts(prompts, len(workers))
        refs = [worker.generate.remote(part, rank_seeded(params, rank))
                for rank, (worker, part) in enumerate(zip(workers, parts)) if len(part)]
        return concat_rollouts(self._gather(ROLLOUT, refs), self.pad_token_id)

    def sync_weights(self) -> None:
        """Every training rank gathers the full weights (a collective), rank 0 streams them; every rollout
        worker receives them. A failure leaves the others blocked in the stream's group, so it stops them all."""
        receives = [worker.receive_weights.remote() for worker in self.live_workers(ROLLOUT)]
        sends = [worker.call.remote(ACTOR, "send_weights") for worker in self.live_workers(ACTOR)]
        try:
            self.gather_roles({ROLLOUT: receives, ACTOR: sends})
        except ray.exceptions.RayTaskError:
            self.close()
            raise

    def live_workers(self, role: str) -> list:
        workers = super().live_workers(role)
        return self.rollout_workers if role == ROLLOUT else workers

    def close(self) -> None:
        kill_and_wait(self.rollout_workers)
        self.rollout_workers = []
        super().close()
