"""The FSDP2 training engine: forward passes and updates of a `fully_shard`ed policy or value model.

`head` picks what the model's output means: "policy" (a causal LM: response log-probs and
entropy), "value" (a token-classification model with one label: a value per response token,
PPO's critic) or "reward" (a scalar-head model: one score per row, at its last token). It knows
nothing about algorithms: `update` takes a loss function that turns the head's outputs, the
micro-batch and global normalisers into this micro-batch's share of the mini-batch loss. Global
normalisers are summed over data-parallel ranks before any backward, so the gradient does not
depend on how the mini-batch was split across micro-batches or ranks.
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_state_dict,
)
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy

from core.batch import Batch
from core.data.preference import PAIR_KEY
from core.engine.distributed import World, all_reduce_max, all_reduce_mean, all_reduce_sum
from core.engine.logprob_head import DEFAULT_CHUNK_TOKENS
from core.engine.packing import register_varlen_attention, response_rows, split_groups_to, token_budget_groups
from core.engine.policy_model import PolicyLM
from core.engine.reward_head import RewardLM
from core.engine.sharding import check_checkpoint_layers, decoder_layers, shard_model
from core.engine.tp import clip_grad_norm, shard_model_2d
from core.models.adapter import FULL_WEIGHTS, PolicyAdapter
from core.models.lora import is_adapter_param
from core.tracking.metrics import reduce_metrics

# head="policy": loss_fn(log_probs, entropy, micro, num_tokens, num_seqs) -> (loss, metrics)
LossFn = Callable[[torch.Tensor, torch.Tensor, Batch, float, float], tuple[torch.Tensor, dict]]
# head="value":  loss_fn(values, micro, num_tokens, num_seqs) -> (loss, metrics); head="reward": (scores, ...)
ValueLossFn = Callable[[torch.Tensor, Batch, float, float], tuple[torch.Tensor, dict]]
HEADS = {"policy": "actor", "value": "critic", "reward": "reward_model"}  # head -> prefix of the engine's own metrics


@dataclass(frozen=True)
class OptimConfig:
    lr: float = 1e-6
    betas: tuple[float, float] = (0.9, 0.999)
    weight_decay: float = 0.01
    warmup_steps: int = 0
    grad_clip: float = 1.0


class FSDPEngine:
    """`lora`: the policy's adapter (core/models/adapter.py), which the engine asks what trains, what its weights
    are under HF names and what a checkpoint holds: a `LoraSpec`, or `FULL_WEIGHTS` for a plain model."""

    def __init__(self, model: torch.nn.Module, world: World, *, optim: OptimConfig | None = None,
                 micro_batch_size: int = 8, mixed_precision: str = "auto",
                 gradient_checkpointing: bool = False, checkpoint_layers: int | None = None,
                 head: str = "policy", cpu_offload: bool = False,
                 remove_padding: bool | str = "auto", micro_batch_tokens: int | None = None,
                 logprob_chunk_tokens: int = DEFAULT_CHUNK_TOKENS, compile_layers: bool | str = False,
                 lora: PolicyAdapter = FULL_WEIGHTS):
        if head not in HEADS:
            raise ValueError(f"FSDPEngine head={head!r}: expected one of {list(HEADS)}")
        self.world, self.head, self.prefix, self.adapter = world, head, HEADS[head], lora
        self.micro_batch_size, self.micro_batch_tokens = micro_batch_size, micro_batch_tokens
        self.remove_padding = _on_cuda(remove_padding, "actor.remove_padding", world.device) and head == "policy"
        mp_policy = _mp_policy(mixed_precision, world.device)
        model = lora.apply_to(model, mp_policy.param_dtype if mp_policy else None, tensor_parallel=world.mesh is not None)
        if gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=lora.gradient_checkpointing_kwargs)
            if checkpoint_layers is not None:
                recompute_first_layers(model, checkpoint_layers)
        if self.remove_padding:
            model.set_attn_implementation(register_varlen_attention())
        if head == "policy":
            model = PolicyLM(model, logprob_chunk_tokens)
        elif head == "reward":
            model = RewardLM(model)
        if _on_cuda(compile_layers, "actor.compile_layers", world.device):
            # Fuses each block's norms, rotary and activations, and frees their intermediates: on an H100,
            # Qwen3-1.7B went from 23% to 42% MFU (bench/perf/train_mfu_gpu.py). Packed lengths vary: dynamic.
            for layer in decoder_layers(model):
                layer.compile(dynamic=True)
        # With offload the sharded parameters, gradients and optimizer state live in host memory and
        # FSDP2 moves each layer to the device for its forward/backward: slower, but it fits.
        offload = CPUOffloadPolicy(pin_memory=False) if cpu_offload and world.device.type == "cuda" else None
        model = model if offload else model.to(world.device)
        if world.mesh is not None:  # tensor parallel inside each dp group, FSDP2 across them
            if offload is not None:
                raise ValueError("actor.cpu_offload with actor.tensor_parallel_size > 1 is not supported")
            self.model = shard_model_2d(model, world.mesh, mp_policy)
        else:
            self.model = shard_model(model, mp_policy, offload)
        self.optimizer, self.scheduler = None, None
        # With LoRA only the adapters: their fp32 weights are the only ones with gradients and AdamW state.
        self.trainable = [param for param in self.model.parameters() if param.requires_grad]
        if optim is not None:
            self.optim = optim
            self.optimizer = torch.optim.AdamW(self.trainable, lr=optim.lr, betas=optim.betas,
                                               weight_decay=optim.weight_decay)
            warmup = max(1, optim.warmup_steps)
            self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda s: min(1.0, (s + 1) / warmup))
        else:
            self.model.requires_grad_(False)

    # ---- forward ------------------------------------------------------------------------------
    def _micro_batches(self, batch: Batch) -> list[list[int]]:
        """Row groups: at most `micro_batch_tokens` real tokens each when set, else `micro_batch_size` rows.

        A token budget packs each rank's rows into its own number of groups, but every rank must run as many
        forwards: FSDP2 gathers each layer's weights in a collective, and a rank with one group fewer leaves the
        others waiting in it for ever (seen at 8B on 2 GPUs). The ranks with fewer split their largest groups."""
        lengths, width = batch["attention_mask"].sum(dim=1).numpy(), 1
        if PAIR_KEY in batch.tensors:  # a preference batch: its units are pairs of rows, which the loss compares
            lengths, width = lengths[0::2] + lengths[1::2], 2
        if self.micro_batch_tokens:
            groups = token_budget_groups(lengths, self.micro_batch_tokens)
            most = int(all_reduce_max(len(groups), self.world.device))
            groups = split_groups_to(groups, lengths, most)
        else:
            size = max(1, self.micro_batch_size // width)
            groups = [list(range(i, min(i + size, len(lengths)))) for i in range(0, len(lengths), size)]
        return [[width * unit + offset for unit in group for offset in range(width)] for group in groups]

    def _forward(self, micro: Batch, temperature: float, entropy_grad: bool = False):
        """(B, T_resp) log-probs and entropy of `responses`, zero off the response tokens."""
        rows = response_rows(micro, self.world.device, packed=self.remove_padding)
        log_probs, entropy = self.model(rows.input_ids, rows.position_ids, rows.predict_index, rows.labels,
                                        temperature=temperature, **rows.attention_kwargs())
        return rows.scatter(log_probs), rows.scatter(entropy if entropy_grad else entropy.detach())

    def _forward_values(self, micro: Batch) -> torch.Tensor:
        """(B, T_resp) V(s_t): the value head's output at the position before each response token."""
        values = self.model(
            input_ids=micro["input_ids"].to(self.world.device),
            attention_mask=micro["attention_mask"].to(self.world.device),
            position_ids=micro["position_ids"].to(self.world.device),
            use_cache=False,
        ).logits
        return values[:, -micro["responses"].shape[1] - 1 : -1, 0].float()

    def _forward_scores(self, micro: Batch) -> torch.Tensor:
        """(B,) the reward head's score of each row at its last token."""
        return self.model(*(micro[key].to(self.world.device) for key in ("input_ids", "attention_mask", "position_ids")))

    @torch.no_grad()
    def compute_log_probs(self, batch: Batch, temperature: float = 1.0, with_entropy: bool = False,
                          adapters: bool = True):
        """(B, T_resp) log-probs of `responses` (and entropy), in micro-batches, no grad.

        `adapters=False` (LoRA): the frozen base model's, which is the reference policy."""
        self.model.eval()
        mask = batch["response_mask"]
        log_probs, entropy = torch.zeros(mask.shape), torch.zeros(mask.shape)
        with nullcontext() if adapters else self.adapter.base_only(self.model):
            for rows in self._micro_batches(batch):
                lp, ent = self._forward(batch.select(rows), temperature)
                log_probs[rows], entropy[rows] = lp.cpu(), ent.cpu()
        return (log_probs * mask, entropy * mask) if with_entropy else log_probs * mask

    @torch.no_grad()
    def compute_values(self, batch: Batch) -> torch.Tensor:
        """(B, T_resp) values V(s_t) of the value head, zero on masked tokens, no grad."""
        if self.head != "value":
            raise RuntimeError(f"compute_values needs an engine built with head='value', not {self.head!r}")
        self.model.eval()
        values = torch.zeros(batch["response_mask"].shape)
        for rows in self._micro_batches(batch):
            values[rows] = self._forward_values(batch.select(rows)).cpu()
        return values * batch["response_mask"]

    @torch.no_grad()
    def compute_scores(self, batch: Batch) -> torch.Tensor:
        """(B,) fp32 reward-model scores, in micro-batches, no grad."""
        if self.head != "reward":
            raise RuntimeError(f"compute_scores needs an engine built with head='reward', not {self.head!r}")
        self.model.eval()
        scores = torch.zeros(len(batch))
        for rows in self._micro_batches(batch):
            scores[rows] = self._forward_scores(batch.select(rows)).cpu()
        return scores

    # ---- update -------------------------------------------------------------------------------
    def update(self, batch: Batch, loss_fn: LossFn | ValueLossFn, *, mini_batch_size: int, epochs: int = 1,
               temperature: float = 1.0) -> dict[str, float]:
        """`epochs` passes over mini-batches; each mini-batch is one optimizer step.

        `loss_fn` takes the head's outputs first: (log_probs, entropy, ...) or (values, ...).
        """
        if self.optimizer is None:
            raise RuntimeError("this engine was built without an optimizer (a reference model?)")
        self.model.train()
        step_metrics = []
        for _ in range(epochs):
            for mini in batch.split(mini_batch_size):
                step_metrics.append(self._optimizer_step(mini, loss_fn, temperature))
        self.scheduler.step()
        metrics = reduce_metrics(step_metrics)
        metrics[f"{self.prefix}/lr"] = self.scheduler.get_last_lr()[0]
        # Optimizer steps skipped for a non-finite gradient norm (the norm is global: every rank skips alike).
        metrics[f"{self.prefix}/skipped_steps"] = float(sum(not math.isfinite(m[f"{self.prefix}/grad_norm"])
                                                            for m in step_metrics))
        return all_reduce_mean(metrics, self.world.device)

    def _optimizer_step(self, mini: Batch, loss_fn: LossFn | ValueLossFn, temperature: float) -> dict[str, float]:
        # Over data-parallel ranks only: the tp ranks of a group hold the same rows.
        counted = mini["response_mask"] if "response_mask" in mini else mini["attention_mask"]
        num_tokens = all_reduce_sum(counted.sum().item(), self.world.device, self.world.dp_group)
        num_seqs = all_reduce_sum(len(mini), self.world.device, self.world.dp_group)
        micro_metrics = []
        entropy_grad = getattr(loss_fn, "needs_entropy_grad", True)
        for rows in self._micro_batches(mini):
            micro = mini.select(rows)
            if self.head == "policy":
                outputs = self._forward(micro, temperature, entropy_grad)  # (log_probs, entropy)
            elif self.head == "reward":
                outputs = (self._forward_scores(micro),)
            else:
                outputs = (self._forward_values(micro),)
            loss, metrics = loss_fn(*outputs, micro.to(self.world.device), num_tokens, num_seqs)
            # FSDP averages gradients over dp ranks while `loss` is this rank's share of the global
            # sum: scaling by the dp size turns the average back into that sum.
            (loss * self.world.dp_size).backward()
            micro_metrics.append(metrics)
        grad_norm = self._clip_grad_norm()
        if math.isfinite(grad_norm):
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        # Micro-batch metrics are token means of unequal parts: a plain mean is a fine summary.
        summary = reduce_metrics(micro_metrics)
        summary[f"{self.prefix}/grad_norm"] = grad_norm
        return summary

    def _clip_grad_norm(self) -> float:
        if self.world.mesh is not None:  # parameters on two meshes: the plain clip cannot stack them
            return clip_grad_norm(self.trainable, self.optim.grad_clip)
        norm = torch.nn.utils.clip_grad_norm_(self.trainable, self.optim.grad_clip)
        if hasattr(norm, "full_tensor"):
            norm = norm.full_tensor()
        return float(norm)

    # ---- weights ------------------------------------------------------------------------------
    def full_state_dict(self, adapters: bool = True) -> dict[str, torch.Tensor]:
        """Unsharded CPU weights under HF names on every rank: what a rollout backend loads after an update.
        With LoRA the adapters are merged in (`adapters=False`: the base weights alone)."""
        options = StateDictOptions(full_state_dict=True, cpu_offload=False)
        state = ((k, v.detach().cpu()) for k, v in get_model_state_dict(self.model, options=options).items())
        return dict(self.adapter.hf_weights(state, adapters))

    def iter_full_weights(self, dtype: torch.dtype, device: torch.device, adapters: bool = True):
        """(HF name, unsharded tensor) one parameter at a time, gathered on `device` and cast to `dtype`:
        what a colocated rollout engine loads, never a second copy of the model in memory. With LoRA
        each layer's adapter is merged in, in fp32, before the cast (`adapters=False`: the base alone).
        Collective: every rank must consume it in full, in the same order."""
        # The shard moves first, so the gather runs on `device` (NCCL), also when actor.cpu_offload keeps it in host memory.
        gathered = ((name, _full(param.detach().to(device))) for name, param in self.model.named_parameters())
        for name, tensor in self.adapter.hf_weights(gathered, adapters):
            yield name, tensor.to(dtype)

    def adapter_state(self) -> dict[str, torch.Tensor]:
        """The LoRA adapters alone, unsharded, on the CPU of every rank (fp32). Collective."""
        return {name: _full(param).detach().cpu() for name, param in self.model.named_parameters()
                if is_adapter_param(name)}

    def checkpoint_state(self) -> dict:
        """Unsharded model, optimizer and lr-schedule state on rank 0 ({} on the others).

        Unsharded so a checkpoint does not depend on the world size that wrote it, and `merge`
        needs no distributed code. Collective: every rank must call it.
        """
        # With LoRA the frozen base is left out: it is `lora.base`'s weights, unchanged by training.
        options = StateDictOptions(full_state_dict=True, cpu_offload=True, ignore_frozen_params=not self.adapter.saves_base)
        optimizers = (self.optimizer,) if self.optimizer is not None else ()
        model_state, optim_state = get_state_dict(self.model, optimizers, options=options)
        if not self.world.is_main:
            return {}
        state = self.adapter.checkpoint_files(model_state)
        if self.optimizer is not None:
            state.update(optimizer=optim_state, scheduler=self.scheduler.state_dict())
        return state

    def load_checkpoint(self, directory) -> None:
        """Inverse of `checkpoint_state`, on every rank: each reads the unsharded files (memory-mapped,
        so ranks on one host share the page cache) and keeps its own shard. Collective."""
        def load(name: str):
            return torch.load(Path(directory) / f"{name}.pt", weights_only=True, mmap=True)

        optimizers = (self.optimizer,) if self.optimizer is not None else ()
        set_state_dict(self.model, optimizers, model_state_dict=load("model"),
                       optim_state_dict=load("optimizer") if optimizers else {},
                       options=StateDictOptions(full_state_dict=True, strict=self.adapter.saves_base))
        if self.scheduler is not None:
            self.scheduler.load_state_dict(load("scheduler"))
            self._apply_optim_config()

    def _apply_optim_config(self) -> None:
        """After a resume, this run's optimizer settings, not the checkpoint's: the loaded state carries the
        old lr, betas and weight decay in its param groups, and the old peak lr in the schedule. An unchanged
        config sets the very values it loaded (the same product as the schedule's own step)."""
        self.scheduler.base_lrs = [self.optim.lr] * len(self.optimizer.param_groups)
        for group, lr_lambda in zip(self.optimizer.param_groups, self.scheduler.lr_lambdas):
            group.update(initial_lr=self.optim.lr, lr=self.optim.lr * lr_lambda(self.scheduler.last_epoch),
                         betas=self.optim.betas, weight_decay=self.optim.weight_decay)


def recompute_first_layers(model: torch.nn.Module, count: int) -> None:
    """Gradient checkpointing on the first `count` decoder layers only (Megatron's block recompute): the rest keep
    their activations, so less is recomputed for the memory they hold (core/trainer/memory_estimate.py counts it).
    The first ones, because the backward reaches them last, when the others' activations are already freed."""
    layers = decoder_layers(model)
    check_checkpoint_layers(count, len(layers))
    for layer in layers[count:]:
        layer.gradient_checkpointing = False


def _full(param: torch.Tensor) -> torch.Tensor:
    return param.full_tensor() if hasattr(param, "full_tensor") else param


def _on_cuda(value: bool | str, key: str, device: torch.device) -> bool:
    """`auto` switches a GPU speed-up on only on CUDA: on CPU, packing falls back to a loop over sequences
    and compiling costs more than it saves on the tiny model."""
    if value == "auto":
        return device.type == "cuda"
    if isinstance(value, bool):
        return value
    raise ValueError(f"{key}={value!r}: expected auto, true or false")


def _mp_policy(mixed_precision: str, device: torch.device) -> MixedPrecisionPolicy | None:
    if mixed_precision == "auto":
        mixed_precision = "bf16" if device.type == "cuda" else "fp32"
    if mixed_precision == "fp32":
        return None
    if mixed_precision == "bf16":
        return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    raise ValueError(f"actor.mixed_precision={mixed_precision!r}: expected auto, bf16 or fp32")
