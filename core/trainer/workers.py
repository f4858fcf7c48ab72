"""Roles: the actor, its rollout engine and the reference policy, colocated on one set of devices;
and PPO's critic, a value model with its own optimizer.

The trainer calls these methods with a `Batch`; in local mode the worker lives in-process (one
per rank under torchrun), in Ray mode the same class runs inside actors. Either way the trainer
code does not change.
"""

from __future__ import annotations

import shutil
import tempfile
from collections import deque
from pathlib import Path

import torch

from core.algos.actor_loss import make_actor_loss
from core.algos.aggregation import local_loss_value
from core.algos.value_loss import clipped_value_loss
from core.batch import Batch
from core.engine.allocator import set_expandable_segments
from core.engine.distributed import World
from core.engine.fsdp import FSDPEngine, OptimConfig
from core.models.adapter import PolicyAdapter, policy_adapter
from core.models.lora import write_adapter_dir
from core.models.random_init import build_causal_lm, build_value_model
from core.rollout.base import SamplingParams, generate_rollout
from core.rollout.build import build_rollout
from core.trainer.checkpoint_export import policy_model_path
from core.trainer.metrics import memory_metrics
from core.trainer.start_record import start_phase
from core.trainer.weight_stream import WeightGroup


class ActorRolloutRefWorker:
    """`with_rollout=False` (`trainer.placement=disaggregated`): no rollout engine here; the engines run in
    rollout workers of their own, and rank 0 streams them the weights (`join_weight_group`, `send_weights`)."""

    def __init__(self, config, world: World, model_path: str, tokenizer, *, with_reference: bool,
                 with_rollout: bool = True):
        self.config, self.world, self.tokenizer = config, world, tokenizer
        self.with_reference = with_reference
        actor = config.actor
        batching = engine_batching(actor)
        self.adapter = actor_adapter(config, model_path)
        self.start_record: dict[str, float] = {}  # seconds per start phase (core/trainer/start_record.py)
        self.actor = build_actor_engine(config, world, lambda: self._load(model_path), self.adapter, self.start_record)
        self.ref = None
        if with_reference and not self.adapter.reference_is_base:  # LoRA: the actor's own frozen base
            with start_phase("ref", self.start_record):
                self.ref = FSDPEngine(self._load(model_path), world, **batching)
        self.rollout = None
        if with_rollout:
            with start_phase("rollout_engine", self.start_record):
                self.rollout = build_rollout(config, model_path, tokenizer,
                                             lambda: self._load(model_path).to(world.device), self.adapter)
        if actor.expandable_segments and (not with_rollout or config.rollout.name == "hf"):
            set_expandable_segments(True)  # no engine pool on this rank (a vLLM engine switches them itself)
        self.actor_loss = make_actor_loss(actor, config.data.max_response_length,
                                          track_logprob_drift=config.rollout.calculate_log_probs)
        self._adapter_dir, self._base_in_rollout = None, False
        self.weight_group: WeightGroup | None = None  # rank 0 under trainer.placement=disaggregated
        if with_rollout and config.model.init == "random" and config.rollout.name != "hf":
            with start_phase("first_sync", self.start_record):
                self.sync_weights()  # the engine started from its own dummy weights

    def _load(self, model_path: str) -> torch.nn.Module:
        return build_causal_lm(self.config.model, model_path, seed=self.config.trainer.seed)

    def generate(self, prompts: Batch, params: SamplingParams) -> Batch:
        self.rollout.wake_up()
        try:
            return generate_rollout(self.rollout, prompts, params)
        finally:
            self.rollout.sleep()

    def compute_log_probs(self, batch: Batch) -> Batch:
        """Old-policy log-probs (and the reference's when KL is used) for the PPO ratio."""
        temperature = self.config.rollout.temperature or 1.0
        tensors = {"old_log_probs": self.actor.compute_log_probs(batch, temperature)}
        if self.with_reference:
            tensors |= self.compute_ref_log_probs(batch).tensors
        return Batch(tensors)

    def compute_ref_log_probs(self, batch: Batch) -> Batch:
        """The reference's log-probs alone, when the update supplies π_old itself. With LoRA: the actor's
        forward with its adapters off, which is the base model's exactly."""
        temperature = self.config.rollout.temperature or 1.0
        if self.adapter.reference_is_base:
            return Batch({"ref_log_probs": self.actor.compute_log_probs(batch, temperature, adapters=False)})
        return Batch({"ref_log_probs": self.ref.compute_log_probs(batch, temperature)})

    def update_policy(self, batch: Batch) -> dict[str, float]:
        """The update's metrics, with `rollout/logprob_diff/*` from its own forward where that forward was π_old
        (the trainer skipped the one before it)."""
        metrics = self.actor.update(batch, self.actor_loss, mini_batch_size=mini_batch_rows(self.config, self.world),
                                    epochs=self.config.actor.ppo_epochs,
                                    temperature=self.config.rollout.temperature or 1.0)
        return metrics | self.actor_loss.logprob_drift.pop() | memory_metrics()

    def sync_weights(self) -> None:
        """The trained policy into the rollout engine: full (or LoRA-merged) weights, or with
        `actor.lora.sync=adapter` the adapter alone, once the engine holds the base weights."""
        if self.adapter.rollout_adapter_rank is None:
            self._load_full_weights(adapters=True)
            return
        if not self._base_in_rollout:
            self._load_full_weights(adapters=False)
            self._base_in_rollout = True
        previous, self._adapter_dir = self._adapter_dir, adapter_sync_dir()
        # Every rank writes its own copy: the ranks of one engine may not share a filesystem.
        dtype = torch.bfloat16 if self.world.device.type == "cuda" else None
        write_adapter_dir(self.actor.adapter_state(), self.adapter, self._adapter_dir, dtype)
        self.rollout.load_adapter(str(self._adapter_dir))
        if previous is not None:
            shutil.rmtree(previous, ignore_errors=True)

    def join_weight_group(self, address: tuple[str, int], size: int) -> None:
        """Rank 0: become the sender (rank 0) of the group that streams weights to the rollout workers."""
        self.weight_group = WeightGroup(address, 0, size, self.world.device)

    def send_weights(self) -> None:
        """The trained policy to the rollout workers. Every rank gathers the full weights one tensor at a
        time (a collective); rank 0 streams them out in buckets of `rollout.weight_bucket_mb`."""
        weights = self.actor.iter_full_weights(rollout_weight_dtype(self.config, self.world.device),
                                               self.world.device)
        if self.weight_group is None:
            deque(weights, maxlen=0)  # the other ranks take part in the gather only
        else:
            self.weight_group.send(weights, int(self.config.rollout.weight_bucket_mb * 2**20))

    def close(self) -> None:
        if self._adapter_dir is not None:
            shutil.rmtree(self._adapter_dir, ignore_errors=True)

    def _load_full_weights(self, adapters: bool) -> None:
        if rollout_weight_dtype(self.config, self.world.device) == torch.bfloat16:
            # Device to device, one bf16 tensor at a time: no host round trip, no second model copy.
            self.rollout.load_weights(self.actor.iter_full_weights(torch.bfloat16, self.world.device, adapters))
        else:
            self.rollout.load_weights(self.actor.full_state_dict(adapters))


class CriticWorker:
    """PPO's value model V(s_t): `critic.*` keys set its optimizer, epochs and micro-batches.

    Same architecture as the actor with a scalar head, loaded from `critic.model_path` (null: the
    actor's `model.path`). Precision and gradient checkpointing follow the actor's keys, since
    both models share the devices.
    """

    def __init__(self, config, world: World):
        self.config, self.world = config, world
        critic, actor = config.critic, config.actor
        path = policy_model_path(critic.model_path or config.model.path)
        optim = OptimConfig(lr=critic.lr, betas=tuple(critic.betas), weight_decay=critic.weight_decay,
                            warmup_steps=critic.warmup_steps, grad_clip=critic.grad_clip)
        self.start_record: dict[str, float] = {}
        with start_phase("critic", self.start_record):
            # Re-seeded so every rank (torchrun's or Ray's) builds the same fresh value head, whatever ran before.
            torch.manual_seed(config.trainer.seed)
            model = build_value_model(config.model, path, seed=config.trainer.seed, head_init=critic.value_head_init)
            self.engine = FSDPEngine(model, world, optim=optim, micro_batch_size=critic.micro_batch_size,
                                     mixed_precision=actor.mixed_precision,
                                     gradient_checkpointing=actor.gradient_checkpointing,
                                     checkpoint_layers=actor.checkpoint_layers, head="value")

    def compute_values(self, batch: Batch) -> Batch:
        """(B, T_resp) values of the rollout: GAE's baseline and the value loss's V_old."""
        return Batch({"values": self.engine.compute_values(batch)})

    def update_critic(self, batch: Batch) -> dict[str, float]:
        critic = self.config.critic
        agg = dict(loss_agg_mode=critic.loss_agg_mode, max_response_length=self.config.data.max_response_length)

        def value_loss(values, micro, num_tokens, num_seqs):
            loss, metrics = clipped_value_loss(values, micro["values"], micro["returns"], micro["response_mask"],
                                               cliprange_value=critic.cliprange_value, num_tokens=num_tokens,
                                               num_seqs=num_seqs, **agg)
            reported = local_loss_value(loss.item(), micro["response_mask"], critic.loss_agg_mode,
                                        num_tokens=num_tokens, num_seqs=num_seqs)
            return loss, {"critic/vf_loss": reported, **{f"critic/{k}": v for k, v in metrics.items()}}

        # Mini-batches like the actor's, so both take the same number of optimizer steps per rollout.
        return self.engine.update(batch, value_loss, mini_batch_size=mini_batch_rows(self.config, self.world),
                                  epochs=critic.ppo_epochs)


def engine_batching(actor) -> dict:
    """How the engine batches and computes a forward: the `actor.*` keys every engine of the policy shares."""
    return dict(micro_batch_size=actor.micro_batch_size, micro_batch_tokens=actor.micro_batch_tokens,
                remove_padding=actor.remove_padding, logprob_chunk_tokens=actor.logprob_chunk_tokens,
                compile_layers=actor.compile_layers, mixed_precision=actor.mixed_precision)


def actor_adapter(config, model_path: str) -> PolicyAdapter:
    """`actor.lora` on the base model `model.path` names (a LoRA checkpoint records it)."""
    model = config.model
    return policy_adapter(config.actor.lora, base=dict(
        path=model_path, init=model.init, seed=config.trainer.seed, gguf_file=model.gguf_file,
        trust_remote_code=model.trust_remote_code))


def build_actor_engine(config, world: World, load, adapter: PolicyAdapter, start_record: dict) -> FSDPEngine:
    """The trained policy: `load()`'s model in the FSDP2 engine with AdamW, as `actor.*` sets them. The RL actor
    and the SFT trainer's model are this same engine."""
    actor = config.actor
    optim = OptimConfig(lr=actor.lr, betas=tuple(actor.betas), weight_decay=actor.weight_decay,
                        warmup_steps=actor.warmup_steps, grad_clip=actor.grad_clip)
    with start_phase("actor_model", start_record):
        model = load()
    with start_phase("actor_fsdp", start_record):
        return FSDPEngine(model, world, optim=optim, cpu_offload=actor.cpu_offload,
                          gradient_checkpointing=actor.gradient_checkpointing,
                          checkpoint_layers=actor.checkpoint_layers, lora=adapter, **engine_batching(actor))


def rollout_weight_dtype(config, device: torch.device) -> torch.dtype:
    """What a weight sync hands the engine: bf16 to vLLM or SGLang on a GPU (their serving dtype), else the
    trainer's fp32."""
    return torch.bfloat16 if config.rollout.name in ("vllm", "sglang") and device.type == "cuda" else torch.float32


def adapter_sync_dir() -> Path:
    """A fresh dir for one adapter sync, in memory-backed /dev/shm where there is one."""
    shm = Path("/dev/shm")
    return Path(tempfile.mkdtemp(prefix="recipezoo-adapter-", dir=shm if shm.is_dir() else None))


def mini_batch_rows(config, world: World) -> int:
    """Sequences per mini-batch on one rank: actor.ppo_mini_batch_size prompts × rollout.n samples."""
    return max(1, config.actor.ppo_mini_batch_size * config.rollout.n // world.dp_size)
