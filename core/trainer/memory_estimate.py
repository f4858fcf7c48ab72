"""Will the run fit? Device memory per GPU, estimated from the config before any model loads.

What stays resident on each GPU through a step (FSDP2 shards it over every rank; under
`actor.tensor_parallel_size` the tensors tensor parallel leaves whole, over the dp ranks alone):
- the actor: fp32 master weights, fp32 gradients and AdamW's two fp32 moments = 16 bytes a parameter;
  with LoRA (`actor.lora.rank`) 16 bytes an adapter parameter, and the frozen base 2 bytes a parameter
  (bf16; 4 under actor.mixed_precision=fp32);
- the reference policy (when KL is used): fp32 weights, 4 bytes a parameter (none with LoRA: the base is it);
- PPO's critic: 16 bytes a parameter, like the actor;
with `actor.cpu_offload` these live in host memory instead. The rollout engine takes
`rollout.gpu_memory_utilization` of the device while it generates (its weights, bf16, must fit in
that share with room for a KV cache); the HF backend holds a whole fp32 copy of the policy. With
`trainer.placement=disaggregated` the engine has a GPU of its own, and the training GPUs hold no engine.

`per_gpu_memory` adds the all-gathered weights and the activations of one micro-batch, phase by phase
(generation, with the engine awake; training, with it asleep), as nvidia-smi counts a GPU: with the CUDA
runtime and the blocks PyTorch's caching allocator keeps, two terms fit on measured runs (RUNTIME_GIB,
CACHED_ACTIVATION_SETS; none under actor.expandable_segments). The scale plan (bench/scale/plan.py) records it,
the dry run prints it (core/trainer/plan.py) and the launch check (`check_run_fits`) refuses by it, the last two through
`run_memory` and `check_fits`, so both say the same.
"""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import OmegaConf

from core.engine.sharding import check_checkpoint_layers

GIB = 1024 ** 3
REFERENCE_BYTES_PER_PARAM = 4
FROZEN_BASE_BYTES_PER_PARAM = {"fp32": 4, "bf16": 2, "auto": 2}  # a LoRA base, on a GPU (auto = bf16 there)
ROLLOUT_BYTES_PER_PARAM = 2  # bf16 engine weights
PEAK_TARGET = 0.95  # issue 35's target, the dry run's and bench/scale/plan.py's: no GPU above 95% of its memory
ENGINES = ("vllm", "sglang")  # rollout backends that take rollout.gpu_memory_utilization of the device


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

    from core.models.adapter import policy_adapter

    def meta_model() -> torch.nn.Module:
        model = config.model
        hf_config = AutoConfig.from_pretrained(model_path, gguf_file=model.gguf_file,
                                               trust_remote_code=model.trust_remote_code)
        with torch.device("meta"):
            return AutoModelForCausalLM.from_config(hf_config)

    return policy_adapter(config.actor.lora).adapter_parameter_count(meta_model)


def training_state(config, params: int, ranks: int, *, with_reference: bool, with_critic: bool,
                   adapter_params: int = 0, critic_params: int | None = None) -> dict[str, float]:
    """Bytes per GPU of what FSDP2 shards over `ranks`, by kind: fp32 weights (4 B a parameter; a LoRA
    base at its frozen dtype), fp32 gradients (4 B a trainable parameter), AdamW's two fp32 moments (8 B)
    and the fp32 reference (4 B); PPO's critic adds its own 4 + 4 + 8 for each of `critic_params` (None:
    as many as the policy's; `ModelShape.value_params` counts them exactly). All 0 under actor.cpu_offload."""
    trainable = adapter_params or params
    weights = params * FROZEN_BASE_BYTES_PER_PARAM[config.actor.mixed_precision] + adapter_params * 4 \
        if adapter_params else params * 4
    reference = params * REFERENCE_BYTES_PER_PARAM * (with_reference and not adapter_params)
    critic = (params if critic_params is None else critic_params) * with_critic
    state = {"weights": weights + 4 * critic, "grads": 4 * (trainable + critic),
             "optimizer": 8 * (trainable + critic), "reference": reference}
    on_gpu = not config.actor.cpu_offload
    return {kind: value * on_gpu / max(ranks, 1) for kind, value in state.items()}


def engine_share(config, params: int, device_bytes: float) -> tuple[float, float]:
    """Bytes per GPU of the rollout engine while it generates and of the weights it holds first: vLLM and
    SGLang take `gpu_memory_utilization` of the device, their bf16 weights split over
    `rollout.tensor_model_parallel_size`; the HF backend holds a whole fp32 copy of the policy."""
    rollout = config.rollout
    if rollout.name not in ENGINES:
        return params * 4, params * 4
    return (rollout.gpu_memory_utilization * device_bytes,
            params * ROLLOUT_BYTES_PER_PARAM / rollout.tensor_model_parallel_size)


def engine_on_training_gpus(config) -> bool:
    """The engine shares the training GPUs, unless `trainer.placement=disaggregated` gives it GPUs of its own."""
    return OmegaConf.select(config, "trainer.placement", default="colocated") == "colocated"


def engine_awake_reason(config) -> str | None:
    """Why the engine's share stays allocated through the update on the training GPUs, or None (it sleeps):
    kept awake by rollout.free_cache_engine=false, or generating the next batch beside the update (an off-policy
    trainer.schedule, colocated)."""
    if not engine_on_training_gpus(config):
        return None
    if not OmegaConf.select(config, "rollout.free_cache_engine", default=True):
        return "rollout.free_cache_engine=false"
    schedule = OmegaConf.select(config, "trainer.schedule", default="sync")
    return f"trainer.schedule={schedule} generates beside the update" if schedule != "sync" else None


def check_engine_holds_weights(config, params: int, device_bytes: float) -> None:
    if config.rollout.name not in ENGINES:
        return
    share, weights = engine_share(config, params, device_bytes)
    if weights >= share:
        raise ValueError(
            f"rollout.gpu_memory_utilization gives the engine {share / GIB:.1f} GiB per GPU but its bf16 weights "
            f"alone need {weights / GIB:.1f} GiB ({params / 1e9:.2f}B parameters): raise "
            "rollout.gpu_memory_utilization or rollout.tensor_model_parallel_size")


def run_memory(config, model_path: str, ranks: int, device_bytes: float, *, with_reference: bool,
               with_critic: bool) -> tuple[int, dict]:
    """`model_path`'s parameter count and its `per_gpu_memory` on a GPU of `device_bytes`, prompts at
    data.max_prompt_length (the worst case: no tokenizer yet); for a config that is not a Llama-style decoder's
    (no shape to count activations from), only its training state, engine share and runtime (`state_only`)."""
    model = config.model
    params = count_parameters(model_path, model.trust_remote_code, model.gguf_file)
    adapter_params = count_adapter_parameters(config, model_path)
    try:
        shape = ModelShape.from_pretrained(model_path, model.trust_remote_code, model.gguf_file)
    except AttributeError:  # no activations to count; the state, the engine's share and the runtime still must fit
        state = training_state(config, params, ranks, with_reference=with_reference, with_critic=with_critic,
                               adapter_params=adapter_params)
        engine = engine_share(config, params, device_bytes)[0] * engine_on_training_gpus(config)
        return params, {"state_only": sum(state.values()), "engine": engine, "runtime": RUNTIME_GIB * GIB,
                        "device": device_bytes}
    return params, per_gpu_memory(config, shape, params, ranks, device_bytes, with_reference=with_reference,
                                  with_critic=with_critic, adapter_params=adapter_params)


def check_fits(config, params: int, device_bytes: float, found: dict) -> None:
    """One-line error when a GPU cannot hold the run: the engine's share against its weights, then each
    phase's certain memory (`check_phases`), or for `run_memory`'s `state_only`, the state (`check_state`)."""
    check_engine_holds_weights(config, params, device_bytes)
    if "state_only" in found:
        check_state(found)
    else:
        check_phases(config, found)


def check_state(found: dict) -> None:
    """For a model without a decoder shape (`run_memory`'s `state_only`): its sharded training state beside the
    engine's share and the runtime, activations not counted."""
    need = found["state_only"] + found["engine"] + found["runtime"]
    if need > found["device"]:
        raise ValueError(
            f"the training state needs {found['state_only'] / GIB:.1f} GiB per GPU beside the engine's share "
            f"{found['engine'] / GIB:.1f} GiB and the CUDA runtime {found['runtime'] / GIB:.1f} GiB, of a "
            f"{found['device'] / GIB:.1f} GiB GPU (activations not counted): use more GPUs (trainer.n_gpus_per_node "
            "/ torchrun ranks), actor.cpu_offload=true, or a lower rollout.gpu_memory_utilization")


def planned_roles(config) -> dict[str, bool]:
    """The models a run holds beside the actor, from its config alone (the trainer passes its own at launch):
    a reference where a KL term needs one, a critic under GAE. Keyword arguments of `run_memory`."""
    return {"with_reference": bool(config.actor.use_kl_loss or config.algorithm.use_kl_in_reward),
            "with_critic": config.algorithm.adv_estimator == "gae"}


def check_run_fits(config, model_path: str, ranks: int, *, with_reference: bool, with_critic: bool) -> None:
    """On a CUDA machine, before any model loads or engine starts: fail in one line when a GPU cannot hold
    the run (`check_fits`). The dry run on a CUDA machine refuses the same way (core/trainer/plan.py)."""
    import torch

    if config.trainer.device == "cpu" or not torch.cuda.is_available():
        return
    device_bytes = torch.cuda.get_device_properties(0).total_memory
    params, found = run_memory(config, model_path, ranks, device_bytes, with_reference=with_reference,
                               with_critic=with_critic)
    check_fits(config, params, device_bytes, found)


# ---- phase by phase (bench/scale/plan.py) ----------------------------------------------------------
ACTIVATION_BYTES = 2  # bf16: what the forward computes in under mixed precision
# One decoder layer's tensors kept for its backward, per token, in widths of the hidden size, the k/v
# projection and the MLP: the two norms' inputs and outputs (4 hidden), q before and after its norm and
# rotary and the attention output (3 hidden), k before and after its norm and v (3 kv), the MLP's gate,
# up and product (3 intermediate); while the layer runs backward, the gradients of gate and up (2 more).
LAYER_WIDTHS = {"hidden": 7, "kv": 3, "intermediate": 5}
# The chunked log-prob head (core/engine/logprob_head.py) holds one chunk of logits at a time: bf16 logits,
# one fp32 working copy and the bf16 gradient.
LOGIT_CHUNK_BYTES_PER_ENTRY = 2 + 4 + 2
PREFETCHED_LAYERS = 2  # FSDP2 all-gathers the next layer while this one computes
# What nvidia-smi counts beyond PyTorch's tensors and the engine's share: the process's CUDA context, NCCL's
# and cuBLAS's workspaces, vLLM's CUDA graphs. Not derivable from a config, so fit on the H200 rows whose peak
# is the generation phase: PPO on 4 GPUs (issue 35: 96.3 GiB measured, 93.2 of state and engine share
# computed) and DAPO's 2-GPU rank 0 (98.8 measured, 94.9 computed; results/scale/dapo_qwen3-8b_2gpu_torchrun.json).
RUNTIME_GIB = 3.4
ENGINE_NON_TORCH_GIB = 0.12  # a vLLM engine's memory outside torch's allocator (vLLM 0.26's log, Qwen3-8B, H200)
# PyTorch's caching allocator hands a freed block only to a request no larger than it, and gives nothing
# back until empty_cache (here: only when vLLM wakes). Packed micro-batches differ in length, and the no-grad
# log-prob passes before the update cut blocks of other sizes, so a micro-batch longer than those before it
# gets new blocks while the old stay reserved: nvidia-smi sees the token-sized activations held more than
# once. How often depends on the order of lengths on each rank, so the count is fit, not derived: 1.6 more
# sets puts the fullest GPU of each H200 row of issue 35 within 5 points (GRPO 2 GPUs 135.7 / 124.2 GiB on
# rank 0 / 1, RLOO 2 GPUs 135.7 / 128.1, DAPO 2 GPUs 98.8 / 110.9, GRPO 4 GPUs 89-90). Single ranks held
# 1.2 to 2.0 more sets; both 135.7s are probably the device's ceiling, 4.7 GiB short of it, where a larger
# request makes the allocator free its cache and retry. All fit with actor.expandable_segments off (the default).
CACHED_ACTIVATION_SETS = 1.6
# With actor.expandable_segments on (core/engine/allocator.py) a freed tail serves a request of any size, so no
# set is counted. Measured once (results/scale/logs/grpo_qwen3-8b_2gpu_torchrun_expandable_segments.suite.log):
# GRPO on 2 H200s peaked at 114.5 GiB against 135.7 without, within 1 point of this model's 113.6 (its
# generation phase; the update's 104.7 cannot be told apart in nvidia-smi's maximum, so the term is at most
# 9.8 GiB there, 0.6 sets).
CACHED_ACTIVATION_SETS_EXPANDABLE = 0.0


@dataclass(frozen=True)
class ModelShape:
    """What the activation arithmetic needs from a decoder's config.json."""
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied_embeddings: bool

    @classmethod
    def from_pretrained(cls, model_path: str, trust_remote_code: bool = False,
                        gguf_file: str | None = None) -> "ModelShape":
        from transformers import AutoConfig

        c = AutoConfig.from_pretrained(model_path, gguf_file=gguf_file, trust_remote_code=trust_remote_code)
        head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
        return cls(c.hidden_size, c.num_hidden_layers, c.num_attention_heads,
                   getattr(c, "num_key_value_heads", None) or c.num_attention_heads, head_dim,
                   c.intermediate_size, c.vocab_size, bool(getattr(c, "tie_word_embeddings", False)))

    @property
    def kv_width(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def layer_params(self) -> int:  # q, k, v, o, gate, up, down, two norms, q and k head norms
        attention = 2 * self.hidden * self.heads * self.head_dim + 2 * self.hidden * self.kv_width
        return attention + 3 * self.hidden * self.intermediate + 2 * self.hidden + 2 * self.head_dim

    @property
    def root_params(self) -> int:  # FSDP2's root unit: embeddings, final norm, LM head
        return self.vocab * self.hidden * (1 + (not self.tied_embeddings)) + self.hidden

    @property
    def value_params(self) -> int:  # PPO's critic: the same decoder with a scalar head in place of the LM head
        return self.layers * self.layer_params + self.vocab * self.hidden + 2 * self.hidden

    def replicated_params(self, params: int) -> int:
        """Of a model of `params` built on these layers (the policy, or the critic's `value_params`), those tensor
        parallel leaves whole on each tp rank (core/engine/tp.py splits only the attention and MLP projections):
        everything outside the decoder layers, and every layer's norms."""
        return params - self.layers * self.layer_params + self.layers * (2 * self.hidden + 2 * self.head_dim)

    def tensor_parallel_params(self, params: int, tp: int) -> int:
        """The parameter count whose share over all `tp` × dp ranks is what one GPU holds: FSDP2 shards the split
        projections over every rank but the replicated tensors over the dp ranks alone, tp times as much each."""
        return params + self.replicated_params(params) * (tp - 1)


def micro_batch_tokens(config, world: int, prompt_tokens: float | None = None) -> int:
    """Tokens of the largest training micro-batch on one rank: `actor.micro_batch_tokens`, else
    `actor.micro_batch_size` rows (fewer when a rank's share of a mini-batch is smaller), packed into one
    row, each a prompt of `prompt_tokens` (the data's mean; None: `data.max_prompt_length`, the worst case)
    and a response at full length, which a rollout that never stops early (random weights) reaches."""
    actor, data = config.actor, config.data
    if actor.micro_batch_tokens:
        return actor.micro_batch_tokens
    rows_per_rank = actor.ppo_mini_batch_size * config.rollout.n // max(world // actor.tensor_parallel_size, 1)
    prompt = data.max_prompt_length if prompt_tokens is None else prompt_tokens
    return round(min(actor.micro_batch_size, rows_per_rank) * (prompt + data.max_response_length))


def activation_bytes(shape: ModelShape, tokens: int, *, checkpointed: int, chunk_tokens: int) -> dict[str, float]:
    """Activations of one micro-batch of `tokens` in the update, by part, with the first `checkpointed` decoder
    layers under gradient checkpointing (0: none, `shape.layers`: all). A checkpointed layer keeps only its
    input and recomputes its internals in the backward, one layer at a time; the others keep theirs. The
    backward reaches the checkpointed (first) layers after it has freed the others' internals, so the peak
    holds the larger of the others' internals and one recomputed layer's. Counted as for
    actor.tensor_parallel_size=1 (tensor parallel splits some of them)."""
    per_token_layer = ACTIVATION_BYTES * (LAYER_WIDTHS["hidden"] * shape.hidden + LAYER_WIDTHS["kv"] * shape.kv_width
                                          + LAYER_WIDTHS["intermediate"] * shape.intermediate)
    layer_input = ACTIVATION_BYTES * shape.hidden * tokens
    kept = shape.layers - checkpointed  # layers that keep their internals from forward to backward
    return {
        "layer_inputs": layer_input * checkpointed,
        "layer_internals": per_token_layer * tokens * (max(kept, 1) if checkpointed else shape.layers),
        "logits_chunk": min(chunk_tokens, tokens) * shape.vocab * LOGIT_CHUNK_BYTES_PER_ENTRY,
    }


def gathered_bytes(shape: ModelShape, param_bytes: int = 2, tp: int = 1) -> dict[str, float]:
    """Unsharded copies FSDP2 holds while the update runs: the root unit's weights, kept gathered through
    forward and backward; two decoder layers' weights (the one computing and the one prefetched) and their
    gradients before the fp32 reduce-scatter, each a tp rank's slice under tensor parallel; the LM head's
    gradient, accumulated in fp32 by the log-prob head."""
    return {"root_weights": shape.root_params * param_bytes,
            "layer_weights": PREFETCHED_LAYERS * shape.layer_params * param_bytes / tp,
            "layer_grads": PREFETCHED_LAYERS * shape.layer_params * 4 / tp,
            "lm_head_grad": shape.vocab * shape.hidden * 4}


def engine_kwargs(config) -> dict:
    """`rollout.engine_kwargs`, the engine's own arguments passed through (empty when unset)."""
    return OmegaConf.select(config, "rollout.engine_kwargs", default=None) or {}


def engine_profile_bytes(config, shape: ModelShape, device_bytes: float) -> float:
    """What a vLLM engine keeps of its share besides the weights: the peak of the one forward it profiles at start
    (`max_num_batched_tokens`, by default 16384 on a GPU of 70 GiB or more, else 8192: vLLM's offline defaults),
    counted as the MLP's gate/up and activation outputs and three hidden-size buffers, bf16, per batched token,
    over `rollout.tensor_model_parallel_size`; plus its non-torch memory. Qwen3-8B on an H200: 1.50 + 0.12 GiB
    here, 1.53 + 0.12 in vLLM 0.26's log (results/scale/logs/*.run-tail.log), whose KV cache then held 233,120
    tokens at a 0.35 share; counting the weights alone, this plan said 246,733."""
    tokens = engine_kwargs(config).get("max_num_batched_tokens") or (16384 if device_bytes >= 70 * GIB else 8192)
    per_token = (3 * shape.intermediate + 3 * shape.hidden) * ACTIVATION_BYTES / config.rollout.tensor_model_parallel_size
    return tokens * per_token + ENGINE_NON_TORCH_GIB * GIB


def fixed_kv_cache_bytes(config) -> float | None:
    """vLLM's `kv_cache_memory_bytes` (rollout.engine_kwargs), a KV cache of that size on each GPU: vLLM then
    skips sizing it from `gpu_memory_utilization` (its log: "reserved ... as specified by kv_cache_memory_bytes")."""
    kv_bytes = engine_kwargs(config).get("kv_cache_memory_bytes") if config.rollout.name == "vllm" else None
    return float(kv_bytes) if kv_bytes else None


def rollout_bytes(config, shape: ModelShape, params: int, device_bytes: float) -> dict[str, float]:
    """The engine's share while it generates: `gpu_memory_utilization` of the device, of which its bf16
    weights (split over `rollout.tensor_model_parallel_size`) and its profiled forward (`engine_profile_bytes`)
    come first and the rest bounds the KV cache; with `fixed_kv_cache_bytes`, those three summed."""
    share, weights = engine_share(config, params, device_bytes)
    if config.rollout.name not in ENGINES:
        return {"share": share, "weights": weights, "profile": 0.0, "kv_cache": 0.0, "kv_tokens_per_engine": 0.0}
    tp = config.rollout.tensor_model_parallel_size
    kv_per_token_per_gpu = 2 * shape.layers * shape.kv_width * ACTIVATION_BYTES / tp  # K and V, bf16
    profile = engine_profile_bytes(config, shape, device_bytes)
    kv_cache = fixed_kv_cache_bytes(config)
    if kv_cache is None:
        kv_cache = max(share - weights - profile, 0.0)
    else:
        share = weights + profile + kv_cache
    return {"share": share, "weights": weights, "profile": profile, "kv_cache": kv_cache,
            "kv_tokens_per_engine": kv_cache / kv_per_token_per_gpu}


def per_gpu_memory(config, shape: ModelShape, params: int, world: int, device_bytes: float, *,
                   with_reference: bool, with_critic: bool, adapter_params: int = 0,
                   prompt_tokens: float | None = None) -> dict:
    """Bytes per GPU as nvidia-smi counts them, phase by phase. Generation: the sharded state without
    gradients (freed after each optimizer step), the engine's share (`engine`: none on the training GPUs under
    trainer.placement=disaggregated) and the runtime. Training (the engine
    asleep): all the state, the gathered copies, one micro-batch's activations and the runtime
    (`training_allocated`, what must fit), plus the blocks the caching allocator keeps from earlier
    micro-batches (`allocator_cache`, what is likely). `prompt_tokens`: see `micro_batch_tokens`."""
    actor, tp = config.actor, config.actor.tensor_parallel_size
    state = training_state(config, shape.tensor_parallel_params(params, tp), world, with_reference=with_reference,
                           with_critic=with_critic, adapter_params=adapter_params,
                           critic_params=shape.tensor_parallel_params(shape.value_params, tp))
    gathered = gathered_bytes(shape, 4 if actor.mixed_precision == "fp32" else 2, tp)
    tokens = micro_batch_tokens(config, world, prompt_tokens)
    checkpointed = 0
    if actor.gradient_checkpointing:  # the dry run refuses a count the model cannot give, as the run does
        checkpointed = shape.layers if actor.checkpoint_layers is None else actor.checkpoint_layers
        check_checkpoint_layers(checkpointed, shape.layers)
    activations = activation_bytes(shape, tokens, checkpointed=checkpointed, chunk_tokens=actor.logprob_chunk_tokens)
    rollout = rollout_bytes(config, shape, params, device_bytes)
    runtime = RUNTIME_GIB * GIB
    engine = rollout["share"] * engine_on_training_gpus(config)
    awake = engine if engine_awake_reason(config) else 0.0  # its share beside the state through the update
    generation = sum(state.values()) - state["grads"] + engine + runtime
    allocated = sum(state.values()) + sum(gathered.values()) + sum(activations.values()) + awake + runtime
    expandable = OmegaConf.select(config, "actor.expandable_segments", default=False)
    cache_sets = CACHED_ACTIVATION_SETS_EXPANDABLE if expandable else CACHED_ACTIVATION_SETS
    cache = cache_sets * token_activations(activations)
    return {"state": state, "gathered": gathered, "activations": activations, "rollout": rollout, "engine": engine,
            "engine_awake": awake, "micro_batch_tokens": tokens, "runtime": runtime, "allocator_cache": cache,
            "allocator_cache_sets": cache_sets,
            "generation_peak": generation, "training_allocated": allocated, "training_peak": allocated + cache,
            "peak": max(generation, allocated + cache), "device": device_bytes}


def token_activations(activations: dict[str, float]) -> float:
    """The activations whose size follows the micro-batch's length (the logits chunk has a fixed size)."""
    return activations["layer_inputs"] + activations["layer_internals"]


def expandable_segments_lever(config, found: dict, limit: float) -> str | None:
    """`actor.expandable_segments=true` when the update is over `limit` only by the allocator's cached blocks
    (and generation is within it); None otherwise. SGLang's memory saver refuses it (core/trainer/config_checks.py)."""
    if (OmegaConf.select(config, "actor.expandable_segments", default=False) or config.rollout.name == "sglang"
            or max(found["training_allocated"], found["generation_peak"]) > limit):
        return None
    return f"actor.expandable_segments=true (no cached blocks: {found['allocator_cache'] / GIB:.1f} GiB less)"


def micro_batch_tokens_within(found: dict, limit: float, *, cached: bool) -> int:
    """The largest `actor.micro_batch_tokens` whose training phase stays within `limit` bytes, with the
    allocator's cached blocks (`cached`) or without them; 0 when the state alone does not leave room."""
    per_token = token_activations(found["activations"]) / found["micro_batch_tokens"]
    fixed = found["training_allocated"] - token_activations(found["activations"])
    return max(int((limit - fixed) / (per_token * (1 + found["allocator_cache_sets"] * cached))), 0)


def engine_share_within(config, found: dict, limit: float) -> float:
    """The largest `rollout.gpu_memory_utilization` whose generation phase stays within `limit` bytes, and the
    update too where the engine stays awake through it (`engine_awake_reason`)."""
    if config.rollout.name not in ENGINES or fixed_kv_cache_bytes(config):  # a fixed cache ignores the share
        return 0.0
    resident = found["generation_peak"] - found["engine"]
    if found["engine_awake"]:
        resident = max(resident, found["training_peak"] - found["engine_awake"])
    return max((limit - resident) / found["device"], 0.0)


def phase_parts(config, found: dict) -> dict[str, dict[str, float]]:
    """Each phase's certain memory (`per_gpu_memory`) by named part, in bytes: what the launch check's
    error and the dry run list."""
    state = found["state"]
    engine = (f"the engine's rollout.gpu_memory_utilization={config.rollout.gpu_memory_utilization} share"
              if config.rollout.name in ENGINES else "the HF engine's fp32 weights")
    if kv_cache := fixed_kv_cache_bytes(config):
        engine = f"the engine's weights, forward and {kv_cache / GIB:.1f} GiB KV cache (kv_cache_memory_bytes)"
    generation = {"training state without gradients": sum(state.values()) - state["grads"], engine: found["engine"],
                  "CUDA runtime": found["runtime"]}
    update = {"training state": sum(state.values()), "gathered weights": sum(found["gathered"].values()),
              f"activations of {found['micro_batch_tokens']} tokens": sum(found["activations"].values()),
              f"{engine}, awake ({engine_awake_reason(config)})": found["engine_awake"],
              "CUDA runtime": found["runtime"]}
    return {"generation": {name: value for name, value in generation.items() if value or name != engine},
            "update": {name: value for name, value in update.items() if value or "awake" not in name}}


def check_phases(config, found: dict) -> None:
    """One-line error when a phase's certain memory (`per_gpu_memory`, without the allocator's cache) exceeds
    the GPU: what it needs, and the key that brings it within the device."""
    device, gib = found["device"], lambda value: f"{value / GIB:.1f} GiB"
    more = "more GPUs (trainer.n_gpus_per_node / torchrun ranks) or actor.cpu_offload=true"
    parts = {phase: " + ".join(f"{name} {gib(value)}" for name, value in named.items())
             for phase, named in phase_parts(config, found).items()}
    # Generation holds less than the update but the engine's share: with no engine on this GPU, the update's check says it.
    if found["engine"] and found["generation_peak"] > device:
        share = engine_share_within(config, found, device)
        lever = f"lower rollout.gpu_memory_utilization to {share:.2f} or less, or use {more}" if share else f"use {more}"
        raise ValueError(f"generation needs {gib(found['generation_peak'])} per GPU ({parts['generation']}) of a "
                         f"{gib(device)} GPU: {lever}")
    if found["training_allocated"] > device:
        budget = micro_batch_tokens_within(found, device, cached=False)
        lever = (f"set actor.micro_batch_tokens={budget} or less (now {found['micro_batch_tokens']} tokens a "
                 f"micro-batch), or use {more}") if budget else f"use {more}"
        raise ValueError(f"the update needs {gib(found['training_allocated'])} per GPU ({parts['update']}) of a "
                         f"{gib(device)} GPU: {lever}")
