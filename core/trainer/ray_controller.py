"""The Ray controller (DESIGN.md §2): one driver runs `fit`; the roles run in a group of Ray actors, one
per data-parallel rank, each joining one torch.distributed group (gloo on CPU, NCCL on GPU) so FSDP2
shards across them. Each actor holds the actor+rollout+ref role and, when the recipe needs one,
PPO's critic beside it on the same device, as verl colocates them.

The group has the methods of `ActorRolloutRefWorker` (and its `critic` those of `CriticWorker`), so
the trainer does not know which controller runs it: a call splits the `Batch` into contiguous equal
parts by rank (the same parts torchrun's ranks load), runs on every worker, and concatenates the
results. Multi-node is a Ray cluster (`ray start --head` / `ray start --address=...`, then
RAY_ADDRESS for the driver).
"""

from __future__ import annotations

import dataclasses
import os
import socket
import time
from types import SimpleNamespace

import ray
import torch
from omegaconf import OmegaConf

from core.batch import Batch
from core.config import ConfigError
from core.engine.distributed import init_distributed
from core.models.loading import load_tokenizer
from core.rollout.base import SamplingParams, concat_rollouts
from core.trainer.judge_worker import JudgeWorker
from core.trainer.reward_model_worker import RewardModelWorker
from core.trainer.seed import seed_everything
from core.trainer.setup import host_threads
from core.trainer.start_record import slowest, start_phase
from core.trainer.workers import ActorRolloutRefWorker, CriticWorker

ACTOR, CRITIC, REWARD_MODEL, JUDGE = "actor_rollout", "critic", "reward_model", "judge"
ENGINE_ATTR = {ACTOR: "actor", CRITIC: "engine"}  # each role's training engine, as checkpoints see it
DEATH_GRACE_S = 10  # how long a failed call waits for its peers' calls, to tell a failure from a death
# Ray starts its workers at nice 15 (its `worker_niceness`), torchrun its ranks at the launcher's: under any CPU
# contention a worker's engine loop, kernel launches and host copies would yield to every other process. Workers
# run at nice 0 instead, on a cluster started here or one joined (a runtime_env reaches either).
WORKER_RUNTIME_ENV = {"env_vars": {"RAY_worker_niceness": "0"}}


class WorkerDiedError(RuntimeError):
    """A worker of a group died; the message names its role and rank."""


def connect_ray() -> None:
    """Join the cluster at RAY_ADDRESS, or start a local one (a laptop, CI)."""
    if not ray.is_initialized():
        ray.init(address=os.environ.get("RAY_ADDRESS"), include_dashboard=False, log_to_driver=True)


@ray.remote
class RankWorker:
    """One rank: sets torchrun's environment, joins the process group, builds the role's worker."""

    def __init__(self, rank: int, world_size: int):
        self.rank, self.world_size, self.roles = rank, world_size, {}

    def address(self) -> tuple[str, int]:
        with socket.socket() as sock:
            sock.bind(("", 0))
            port = sock.getsockname()[1]
        return ray.util.get_node_ip_address(), port

    def node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()

    def setup(self, master: tuple[str, int], config_container: dict, model_path: str, with_reference: bool,
              with_critic: bool, with_rollout: bool) -> tuple[tuple[float, float], dict[str, float]]:
        """Returns when it ran (epoch seconds, began and ended) and its start phases (start_record.py)."""
        began, record = time.time(), {}
        os.environ.update(RANK=str(self.rank), WORLD_SIZE=str(self.world_size), LOCAL_RANK="0",
                          MASTER_ADDR=master[0], MASTER_PORT=str(master[1]))
        config = OmegaConf.create(config_container)
        # Ray gives each worker one CPU slot: one thread, unless an offloaded optimizer needs the node's cores.
        threads = host_threads(config.trainer.num_threads, bool(config.actor.cpu_offload), config.trainer.n_gpus_per_node)
        torch.set_num_threads(threads or 1)
        with start_phase("dist_init", record):
            world = init_distributed(config.trainer.device)
        seed_everything(config.trainer.seed)  # every rank builds identical weights, as under torchrun
        tokenizer = load_tokenizer(model_path, config.model.gguf_file, config.model.trust_remote_code)
        self.roles = {ACTOR: ActorRolloutRefWorker(config, world, model_path, tokenizer, with_reference=with_reference,
                                                   with_rollout=with_rollout)}
        if with_critic:
            self.roles[CRITIC] = CriticWorker(config, world)
        if colocated_reward_model(config):
            self.roles[REWARD_MODEL] = RewardModelWorker(config, world, tokenizer)
        if config.reward.judge.enable:  # the judge's engine on this worker's device, as on a torchrun rank
            self.roles[JUDGE] = JudgeWorker(config, world.device, tokenizer)
        for role in self.roles.values():
            record |= role.start_record
        return (began, time.time()), record

    def call(self, role: str, method: str, *args):
        return getattr(self.roles[role], method)(*args)

    def engine_call(self, role: str, method: str, *args):
        return getattr(getattr(self.roles[role], ENGINE_ATTR[role]), method)(*args)

    def hf_model_files(self, role: str) -> SimpleNamespace:
        """What a checkpoint's hf/ dir is written from: the engine model's config and generation config."""
        model = getattr(self.roles[role], ENGINE_ATTR[role]).model
        return SimpleNamespace(config=model.config, generation_config=getattr(model, "generation_config", None))


class RayWorkerGroup:
    """`ActorRolloutRefWorker`'s interface over `num_workers` Ray actors (one per GPU, or per CPU slot);
    `critic`: `CriticWorker`'s interface over the same actors, or None when the recipe has no critic.
    `with_rollout=False`: the actors hold no rollout engine (`DisaggregatedGroup` runs them elsewhere)."""

    def __init__(self, config, model_path: str, tokenizer, *, with_reference: bool, with_critic: bool,
                 num_workers: int, with_rollout: bool = True):
        self.start_record: dict[str, float] = {}  # seconds per start phase, the slowest worker's (start_record.py)
        with start_phase("ray_init", self.start_record):
            connect_ray()
        self.num_workers, self.pad_token_id = num_workers, tokenizer.pad_token_id
        # Workers per role, as errors count them.
        self.sizes = {ACTOR: num_workers, CRITIC: num_workers, REWARD_MODEL: num_workers, JUDGE: num_workers}
        self.death: str | None = None  # what stopped the group, once a worker died
        self.gpus = 1 if config.trainer.device != "cpu" and ray.cluster_resources().get("GPU", 0) else 0
        check_cluster_fits(config, num_workers, self.gpus)
        # Off-policy schedules generate beside the training calls: a second thread in each actor lets the
        # rollout engine (its own copy of the weights) run while the update does; the driver never sends two
        # training calls, or two generations, at once, and syncs weights only once generation has finished.
        threads = 2 if with_rollout and config.trainer.schedule != "sync" else 1
        options = dict(num_cpus=1, num_gpus=self.gpus, max_concurrency=threads, runtime_env=WORKER_RUNTIME_ENV)
        self.workers = [RankWorker.options(**options).remote(rank, num_workers) for rank in range(num_workers)]
        try:
            self._start(config, model_path, with_reference, with_critic, with_rollout)
        except BaseException:
            self.close()  # no actor outlives a group that failed to start
            raise
        self.actor = RemoteEngine(self, ACTOR)
        self.critic = RayCritic(self) if with_critic else None
        self.reward_model = RayRewardModel(self) if colocated_reward_model(config) else None
        self.judge = RayJudge(self) if config.reward.judge.enable else None

    def _start(self, config, model_path: str, with_reference: bool, with_critic: bool, with_rollout: bool) -> None:
        """Every worker's setup at once (each loads its models and starts its engine), with `start_beside`'s
        workers alongside: the start takes as long as the slowest worker, not the sum of them."""
        container = OmegaConf.to_container(config, resolve=True)
        beside = self.start_beside(container, model_path)
        ready = {role: [w.__ray_ready__.remote() for w in workers] for role, (workers, _) in beside.items()}
        ready[ACTOR] = [self.workers[0].address.remote()] + [w.__ray_ready__.remote() for w in self.workers[1:]]
        with start_phase("workers", self.start_record):  # every actor's process up, so every setup starts at once
            master = self.gather_roles(ready)[ACTOR][0]
        with start_phase("setup", self.start_record):
            setups = self.gather_roles({ACTOR: [w.setup.remote(master, container, model_path, with_reference,
                                                               with_critic, with_rollout) for w in self.workers],
                                        **{role: [w.setup.remote(*args) for w in workers]
                                           for role, (workers, args) in beside.items()}})
        # When each worker's setup ran (epoch seconds, per role in rank order): side by side, not one by one.
        self.setup_windows = {role: [window for window, _ in results] for role, results in setups.items()}
        self.start_record |= slowest([record for results in setups.values() for _, record in results])

    def start_beside(self, config_container: dict, model_path: str) -> dict[str, tuple[list, tuple]]:
        """Workers of other roles, set up beside the training ranks (`DisaggregatedGroup`'s rollout workers):
        role -> (its actors, the arguments of their `setup`, which returns what `RankWorker.setup` does)."""
        return {}

    # ---- the worker interface ---------------------------------------------------------------
    def generate(self, prompts: Batch, params: SamplingParams) -> Batch:
        parts = contiguous_parts(prompts, self.num_workers)
        refs = [worker.call.remote(ACTOR, "generate", part, rank_seeded(params, rank))
                for rank, (worker, part) in enumerate(zip(self.live_workers(ACTOR), parts)) if len(part)]
        return concat_rollouts(self._gather(ACTOR, refs), self.pad_token_id)

    def compute_log_probs(self, batch: Batch) -> Batch:
        return Batch.concat(self.run_split(ACTOR, "compute_log_probs", batch))

    def compute_ref_log_probs(self, batch: Batch) -> Batch:
        return Batch.concat(self.run_split(ACTOR, "compute_ref_log_probs", batch))

    def update_policy(self, batch: Batch) -> dict[str, float]:
        return self.run_split(ACTOR, "update_policy", batch)[0]  # already averaged over ranks inside the group

    def sync_weights(self) -> None:
        self.run_all(ACTOR, "call", "sync_weights")

    @property
    def num_devices(self) -> int:
        """The GPUs (or CPU slots) the run holds: what `perf/throughput` is per."""
        return self.num_workers

    def close(self) -> None:
        kill_and_wait(self.workers)
        self.workers = []

    # ---- dispatch ---------------------------------------------------------------------------
    def run_split(self, role: str, method: str, batch: Batch) -> list:
        """Equal contiguous parts: FSDP's collectives need every rank to run the same micro-batches."""
        return self._gather(role, [worker.call.remote(role, method, owned(part))
                                   for worker, part in zip(self.live_workers(role), batch.chunk(self.num_workers))])

    def run_all(self, role: str, worker_method: str, *args) -> list:
        """`worker_method` (a `RankWorker` method taking the role first) on every worker, in rank order."""
        return self._gather(role, [getattr(w, worker_method).remote(role, *args) for w in self.live_workers(role)])

    def live_workers(self, role: str) -> list:
        """The workers, or the error of a group already shut down: under `trainer.schedule=one_step_off`
        the background rollout and the training step both call the group, and either may see a death first."""
        if not self.workers:
            raise WorkerDiedError(self.death or f"{role}: the worker group was shut down")
        return self.workers

    def _gather(self, role: str, refs: list) -> list:
        return self.gather_roles({role: refs})[role]

    def gather_roles(self, refs: dict[str, list]) -> dict[str, list]:
        """Each role's results in rank order, from calls waited on together. A dead worker stops the whole
        group at once (its peers would wait forever in a collective) and raises an error naming its role
        and rank. A worker that dies inside a collective fails its peers' calls first (gloo: "connection
        closed by peer"), so a failed call gives the others a moment to report a death, named instead."""
        labels = {ref: (role, rank) for role, role_refs in refs.items() for rank, ref in enumerate(role_refs)}
        pending, results = list(labels), {}
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            try:
                results[ready[0]] = ray.get(ready[0])
            except ray.exceptions.RayActorError as error:
                raise self._died(*labels[ready[0]], error) from error
            except ray.exceptions.RayTaskError:
                for ref in ray.wait(pending, num_returns=len(pending), timeout=DEATH_GRACE_S)[0]:
                    try:
                        ray.get(ref)
                    except ray.exceptions.RayActorError as error:
                        raise self._died(*labels[ref], error) from error
                    except ray.exceptions.RayTaskError:
                        continue  # another failed peer: the first failure is the one reported
                raise
        return {role: [results[ref] for ref in role_refs] for role, role_refs in refs.items()}

    def _died(self, role: str, rank: int, error: Exception) -> WorkerDiedError:
        """The first death seen shuts the group down; later ones are the shutdown's own kills."""
        if self.death is None:
            self.death = (f"{role} worker rank {rank} of {self.sizes[role]} died ({type(error).__name__}); the "
                          "group was shut down. The last checkpoint is intact: rerun with trainer.resume=auto")
            self.close()
        return WorkerDiedError(self.death)


class RayCritic:
    """`CriticWorker`'s interface over the group's actors, each holding its critic beside the actor."""

    def __init__(self, group: RayWorkerGroup):
        self.group, self.engine = group, RemoteEngine(group, CRITIC)

    def compute_values(self, batch: Batch) -> Batch:
        return Batch.concat(self.group.run_split(CRITIC, "compute_values", batch))

    def update_critic(self, batch: Batch) -> dict[str, float]:
        return self.group.run_split(CRITIC, "update_critic", batch)[0]  # averaged over ranks inside the group


class RayRewardModel:
    """`RewardModelWorker`'s interface over the group's actors, each holding its shard beside the actor."""

    def __init__(self, group: RayWorkerGroup):
        self.group = group

    def compute_rm_scores(self, batch: Batch) -> Batch:
        return Batch.concat(self.group.run_split(REWARD_MODEL, "compute_rm_scores", batch))


class RayJudge:
    """`JudgeWorker`'s interface over the group's actors, each grading a contiguous share of the responses with
    the judge engine beside its actor; the parse failures are summed over the shares."""

    def __init__(self, group: RayWorkerGroup):
        self.group = group

    def score(self, responses: list[str], raw_prompts: list, references: list) -> tuple[torch.Tensor, dict[str, float]]:
        refs = [worker.call.remote(JUDGE, "score", responses[part], raw_prompts[part], references[part])
                for worker, part in zip(self.group.live_workers(JUDGE), contiguous_slices(len(responses),
                                                                                         self.group.num_workers))
                if part.stop > part.start]
        shares = self.group.gather_roles({JUDGE: refs})[JUDGE]
        failures = sum(metrics["reward/judge/parse_failures"] for _, metrics in shares)
        return torch.cat([scores for scores, _ in shares]), {
            "reward/judge/parse_failures": failures, "reward/judge/parse_failure_frac": failures / max(1, len(responses))}


def colocated_reward_model(config) -> bool:
    return bool(config.reward.model.path) and config.reward.model.placement == "colocated"


class RemoteEngine:
    """A role's training engine in the group, as checkpoints see it: every rank takes part in a save or
    load; `model` carries what the checkpoint's hf/ dir is written from, taken from rank 0."""

    def __init__(self, group: RayWorkerGroup, role: str):
        self.group, self.role = group, role
        self.model = group.run_all(role, "hf_model_files")[0]

    def checkpoint_state(self) -> dict:
        return self.group.run_all(self.role, "engine_call", "checkpoint_state")[0]

    def load_checkpoint(self, directory) -> None:
        """Every worker reads the checkpoint itself: a multi-node cluster needs a shared filesystem,
        as torchrun does."""
        self.group.run_all(self.role, "engine_call", "load_checkpoint", str(directory))

    def full_state_dict(self) -> dict:
        return self.group.run_all(self.role, "engine_call", "full_state_dict")[0]


def check_cluster_fits(config, num_workers: int, gpus: int) -> None:
    """Fail before any actor starts when the workers cannot all be placed: Ray would wait for them forever.
    Every worker takes one GPU (or one CPU slot on a CPU-only cluster); disaggregated rollout workers add theirs."""
    resource, unit = ("GPU", "GPUs") if gpus else ("CPU", "CPU slots")
    have = int(ray.cluster_resources().get(resource, 0))
    trainer = config.trainer
    need = f"trainer.nnodes × trainer.n_gpus_per_node = {num_workers} training ranks"
    wanted = num_workers
    if trainer.placement == "disaggregated":
        need, wanted = f"{need} + trainer.rollout_workers={trainer.rollout_workers}", wanted + trainer.rollout_workers
    if wanted > have:
        raise ConfigError(f"{need} need {wanted} {unit}, and the Ray cluster has {have} — lower them, or add nodes "
                          "to the cluster (ray start --address=HEAD_IP:6379)")


def contiguous_parts(batch: Batch, n: int) -> list[Batch]:
    """n contiguous parts as equal as possible (validation batches need not divide evenly), each `owned`: one
    per worker, to be shipped."""
    return [owned(batch.select(part)) for part in contiguous_slices(len(batch), n)]


def contiguous_slices(total: int, n: int) -> list[slice]:
    """n contiguous row ranges of `total` rows, as equal as possible, the larger ones first."""
    sizes = [total // n + (rank < total % n) for rank in range(n)]
    starts = [sum(sizes[:rank]) for rank in range(n)]
    return [slice(start, start + size) for start, size in zip(starts, sizes)]


def owned(part: Batch) -> Batch:
    """`part` with each tensor copied into storage of its own. A row slice is a view, and a view pickles its
    whole storage: each of N workers would receive the whole batch, not its 1/N of it."""
    return Batch({key: tensor.clone() for key, tensor in part.tensors.items()}, part.non_tensors, part.meta)


def rank_seeded(params: SamplingParams, rank: int) -> SamplingParams:
    """Rank r samples with seed + r, exactly as rank r does under torchrun."""
    return params if params.seed is None else dataclasses.replace(params, seed=params.seed + rank)


def kill_and_wait(workers: list, timeout_s: float = 30.0) -> None:
    """Kill the actors and return once each one answers as dead (or after `timeout_s`).

    `ray.kill` only asks the cluster to kill: a call sent right after it may still run on the live
    process, and its GPU memory is not yet free. Waiting makes `close()` mean "gone".
    """
    for worker in workers:
        ray.kill(worker)
    deadline = time.monotonic() + timeout_s
    for worker in workers:
        while time.monotonic() < deadline:
            try:
                ray.get(worker.__ray_ready__.remote(), timeout=max(0.1, deadline - time.monotonic()))
            except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
                break
            time.sleep(0.05)
