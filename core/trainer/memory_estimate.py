"""Will the run fit? Device memory per GPU, estimated from the config before any model loads.

What stays resident on each GPU through a step (FSDP2 shards it over every rank):
- the actor: fp32 master weights, fp32 gradients and AdamW's two fp32 moments = 16 bytes a parameter;
  with LoRA (`actor.lora.rank`) 16 bytes an adapter parameter, and the frozen base 2 bytes a parameter
  (bf16; 4 under actor.mixed_precision=fp32);
- the reference policy (when KL is used): fp32 weights, 4 bytes a parameter (none with LoRA: the base is it);
- PPO's critic: 16 bytes a parameter, like the actor;
with `actor.cpu_offload` these live in host memory instead. The rollout engine takes
`rollout.gpu_memory_utilization` of the device while it generates (its weights, bf16, must fit in
that share with room for a KV cache); the HF backend holds a whole fp32 copy of the policy. With
`trainer.placement=disaggregated` the engine has a GPU of its own, and the training GPUs hold no engine. Activations
come on top and depend on micro-batching, so the check leaves 10% of the device for them and for CUDA's own context.
"""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import OmegaConf

GIB = 1024 ** 3
TRAINING_BYTES_PER_PARAM = 16  # fp32 weight + fp32 grad + AdamW exp_avg + exp_avg_sq
REFERENCE_BYTES_PER_PARAM = 4
FROZEN_BASE_BYTES_PER_PARAM = {"fp32": 4, "bf16": 2, "auto": 2}  # a LoRA base, on a GPU (auto = bf16 there)
ROLLOUT_BYTES_PER_PARAM = 2  # bf16 engine weights
HEADROOM = 0.10  # activations, CUDA context, fragmentation


@dataclass(frozen=True)
class MemoryEstimate:
    params: int
    ranks: int
    resident_gib: float  # training state per GPU, held through generation too
    rollout_gib: float  # the engine's share while it generates (0 for the HF backend)
    rollout_weights_gib: float  # the engine's bf16 weights per GPU
    colocated: bool = True  # the engine on the training GPUs (trainer.placement=colocated), else on its own

    @property
    def peak_gib(self) -> float:
        """The fullest GPU's: a training GPU with its engine, or, disaggregated, whichever pool's is fuller."""
        if self.colocated:
            return self.resident_gib + self.rollout_gib
        return max(self.resident_gib, self.rollout_gib)

    def summary(self) -> str:
        head = (f"{self.params / 1e9:.2f}B parameters over {self.ranks} GPU(s): ≈ {self.resident_gib:.1f} GiB of "
                "training state")
        if not self.colocated:
            return (f"{head} per GPU and {self.rollout_gib:.1f} GiB for the rollout engine on a GPU of its own, before "
                    "activations")
        return (f"{head} + {self.rollout_gib:.1f} GiB for the rollout engine = {self.peak_gib:.1f} GiB per GPU before "
                "activations")


def count_parameters(model_path: str, trust_remote_code: bool = False, gguf_file: str | None = None) -> int:
    """Exact parameter count of `model_path`'s architecture, built on the meta device (no memory)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(model_path, gguf_file=gguf_file, trust_remote_code=trust_remote_code)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, trust_remote_code=trust_remote_code)
    return sum(p.numel() for p in model.parameters())


def count_adapter_parameters(config, model_path: str) -> int:
    """The LoRA adapters' parameters (`actor.lora.*`) on `model_path`'s architecture; 0 without LoRA."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from core.models.lora import LoraSpec, adapter_parameter_count

    spec = LoraSpec.from_config(config.actor.lora)
    if spec is None:
        return 0
    model = config.model
    hf_config = AutoConfig.from_pretrained(model_path, gguf_file=model.gguf_file, trust_remote_code=model.trust_remote_code)
    with torch.device("meta"):
        return adapter_parameter_count(AutoModelForCausalLM.from_config(hf_config), spec)


def estimate(config, params: int, ranks: int, device_gib: float, *, with_reference: bool, with_critic: bool,
             adapter_params: int = 0) -> MemoryEstimate:
    """`adapter_params` > 0: a LoRA policy (`count_adapter_parameters`) over a frozen base of `params`."""
    shards = max(ranks, 1)
    if adapter_params:
        frozen = FROZEN_BASE_BYTES_PER_PARAM[config.actor.mixed_precision]
        actor_bytes = params * frozen + adapter_params * TRAINING_BYTES_PER_PARAM
    else:
        actor_bytes = params * (TRAINING_BYTES_PER_PARAM + REFERENCE_BYTES_PER_PARAM * with_reference)
    state_bytes = (actor_bytes + params * TRAINING_BYTES_PER_PARAM * with_critic) * (not config.actor.cpu_offload)
    engine = config.rollout.name in ("vllm", "sglang")
    tp = config.rollout.tensor_model_parallel_size
    # The HF backend keeps a whole fp32 copy of the policy on every GPU (and its KV cache, not counted).
    rollout_gib = config.rollout.gpu_memory_utilization * device_gib if engine else params * 4 / GIB
    return MemoryEstimate(
        params=params, ranks=ranks, resident_gib=state_bytes / shards / GIB, rollout_gib=rollout_gib,
        rollout_weights_gib=params * ROLLOUT_BYTES_PER_PARAM / tp / GIB if engine else 0.0,
        colocated=OmegaConf.select(config, "trainer.placement", default="colocated") == "colocated")


def check_fits(found: MemoryEstimate, device_gib: float) -> None:
    """One-line error, naming the keys that change the answer, when the run cannot fit a GPU."""
    if found.rollout_gib and found.rollout_weights_gib >= found.rollout_gib:
        raise ValueError(
            f"rollout.gpu_memory_utilization gives the engine {found.rollout_gib:.1f} GiB per GPU but its bf16 weights "
            f"alone need {found.rollout_weights_gib:.1f} GiB ({found.params / 1e9:.2f}B parameters): raise "
            "rollout.gpu_memory_utilization or rollout.tensor_model_parallel_size")
    usable = device_gib * (1 - HEADROOM)
    if found.peak_gib > usable:
        raise ValueError(
            f"the run needs {found.summary()}, more than {usable:.0f} GiB of a {device_gib:.0f} GiB GPU: use more "
            "GPUs (trainer.n_gpus_per_node / torchrun ranks), actor.cpu_offload=true, or a lower "
            "rollout.gpu_memory_utilization")


def check_run_fits(config, model_path: str, ranks: int, *, with_reference: bool, with_critic: bool) -> None:
    """On a CUDA machine, before any model loads: fail in one line when a GPU cannot hold the run."""
    import torch

    if config.trainer.device == "cpu" or not torch.cuda.is_available():
        return
    device_gib = torch.cuda.get_device_properties(0).total_memory / GIB
    params = count_parameters(model_path, config.model.trust_remote_code, config.model.gguf_file)
    check_fits(estimate(config, params, ranks, device_gib, with_reference=with_reference, with_critic=with_critic,
                        adapter_params=count_adapter_parameters(config, model_path)), device_gib)
