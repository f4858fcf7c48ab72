"""Rollout with `sglang.Engine`: the second fast backend, behind the same interface as vLLM's.

SGLang runs on NVIDIA GPUs only, in an environment of its own (bench/requirements-sglang.txt: sglang
0.5.17 with torch 2.11 for CUDA 13), apart from vLLM's, whose flashinfer and transformers pins differ.
A wrong install or a model SGLang has no implementation of fails in one line naming the fix, before
the engine starts: `recipezoo train` calls `preflight` right after the config check, before the trainer
loads any model, and the backend checks again before it builds the engine.

The engine schedules in a subprocess of its own: weights reach it as CUDA IPC handles
(`update_weights_from_tensor`), and `release/resume_memory_occupation` (torch_memory_saver) frees the
weights, KV cache and CUDA graphs while training runs. The weights are backed up to host memory on
release, as vLLM's sleep level 1 does, because a recipe may generate twice between syncs (ReMax's greedy
baseline, DAPO's extra rounds). The surface used: `Engine(...)`, `generate(input_ids=...,
return_logprob=True)`, `update_weights_from_tensor`, `flush_cache`, `release/resume_memory_occupation`.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

import torch

from core.batch import Batch
from core.config import ConfigError
from core.rollout.base import (
    Completion,
    RolloutBackend,
    SamplingParams,
    extra_engine_kwargs,
    rollout_from_token_lists,
    unpadded_prompt_ids,
    uses_stop_strings,
)
from core.rollout.placement import EnginePlacement

SGLANG_VERSION = "0.5.17"  # the release this backend is written against (its post releases pass too)
TORCH_VERSION = "2.11.0"   # sglang 0.5.17 pins torch==2.11.0: its kernels are built against that ABI
INSTALL = "pip install --require-hashes -r bench/requirements-sglang.txt (a GPU machine, an environment of its own)"
WEIGHT_SYNC_CHUNK_BYTES = 512 * 2**20  # bounded device memory for the incoming weights
MEMORY_TAGS = WEIGHTS, KV_CACHE, CUDA_GRAPH = "weights", "kv_cache", "cuda_graph"  # SGLang's memory tags
ENTRY_CLASS = re.compile(r"^EntryClass\s*=\s*(\[[^\]]*\]|\w+)", re.MULTILINE)


def installed_versions() -> dict[str, str | None]:
    """sglang's and torch's versions from package metadata (None: absent); importing sglang takes seconds."""
    versions = {}
    for dist in ("sglang", "torch"):
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[dist] = None
    return versions


def install_problem(versions: dict[str, str | None]) -> str | None:
    """What is wrong with these installed versions for this backend, in one line with the fix; None: fine."""
    from packaging.version import InvalidVersion, Version

    def release(version: str) -> tuple[int, ...]:
        try:
            return Version(version).release[:3]
        except InvalidVersion:
            return ()

    sglang, torch_version = versions["sglang"], versions["torch"]
    if sglang is None:
        return (f"rollout.name=sglang needs SGLang {SGLANG_VERSION}, which is not installed (it runs on NVIDIA GPUs "
                f"only; on CPU use rollout.name=hf or vllm): {INSTALL}")
    if release(sglang) != release(SGLANG_VERSION):
        return f"rollout.name=sglang needs SGLang {SGLANG_VERSION}, found sglang {sglang}: {INSTALL}"
    if torch_version is None or release(torch_version) != release(TORCH_VERSION):
        return f"rollout.name=sglang: sglang {sglang} needs torch {TORCH_VERSION}, found torch {torch_version}: {INSTALL}"
    return None


def check_install() -> str:
    """The installed sglang version, or `ConfigError` naming what was found and the fix."""
    versions = installed_versions()
    problem = install_problem(versions)
    if problem:
        raise ConfigError(problem)
    return versions["sglang"]


def sglang_architectures(package_dir: Path) -> set[str]:
    """The architectures SGLang implements, read from its model files' `EntryClass` without importing them:
    its registry imports ~200 model modules, and CUDA kernels with them."""
    names = set()
    for path in (package_dir / "srt" / "models").glob("*.py"):
        for match in ENTRY_CLASS.finditer(path.read_text(encoding="utf-8", errors="replace")):
            names.update(re.findall(r"\w+", match.group(1)))
    return names


def model_architectures(model_path: str) -> list[str]:
    config = Path(model_path) / "config.json"
    if config.is_file():
        return list(json.loads(config.read_text()).get("architectures") or [])
    from transformers import AutoConfig  # a hub id: its config.json alone is fetched

    return list(AutoConfig.from_pretrained(model_path).architectures or [])


def sglang_package_dir() -> Path:
    return Path(importlib.util.find_spec("sglang").submodule_search_locations[0])


def check_architecture(model_path: str) -> str:
    """The architecture SGLang will serve `model_path` with, or `ConfigError`. SGLang would fall back to its
    Transformers implementation for the rest; the backend asks for its own (`model_impl="sglang"`), the code
    whose speed and weight loading this backend relies on."""
    architectures = model_architectures(model_path)
    served = [name for name in architectures if name in sglang_architectures(sglang_package_dir())]
    if not served:
        raise ConfigError(f"rollout.name=sglang cannot serve model.path={model_path}: SGLang {SGLANG_VERSION} has no "
                          f"implementation of its architectures {architectures}; use rollout.name=vllm or hf")
    return served[0]


def engine_placement(placement: EnginePlacement, seed: int) -> dict:
    """`sglang.Engine` arguments for this rank. SGLang's engine starts its own worker processes, so
    under several ranks each rank's engine is one GPU, its own (`base_gpu_id`, else every rank's engine
    would start on GPU 0); an engine spanning ranks, as vLLM's external launcher does, is not offered."""
    if placement.spmd and placement.tensor_parallel_size > 1:
        raise ValueError(f"rollout.tensor_model_parallel_size={placement.tensor_parallel_size} with rollout.name=sglang "
                         f"over {placement.world_size} ranks: SGLang's engine cannot span ranks; use 1 (one engine "
                         "per GPU) or rollout.name=vllm")
    local_rank = int(os.environ.get("LOCAL_RANK", 0)) if placement.spmd else 0
    return {"tp_size": placement.tensor_parallel_size, "base_gpu_id": local_rank,
            "random_seed": seed + placement.engine_index}


def engine_kwargs(model_path: str, rollout_cfg, placement: EnginePlacement, *, dtype: str, seed: int,
                  max_model_len: int | None, dummy_weights: bool) -> dict:
    """The `sglang.Engine` arguments this rank builds its engine with (pure: the CPU tests pin them)."""
    can_sleep = bool(rollout_cfg.free_cache_engine)
    kwargs = dict(
        model_path=model_path, dtype=dtype, model_impl="sglang",
        # Prompts arrive as token ids and responses are decoded by the trainer; only stop strings
        # (multi-turn tag actions) need the engine's own detokenizer.
        skip_tokenizer_init=not uses_stop_strings(rollout_cfg),
        mem_fraction_static=rollout_cfg.gpu_memory_utilization, context_length=max_model_len,
        enable_memory_saver=can_sleep, enable_weights_cpu_backup=can_sleep,
        disable_cuda_graph=bool(rollout_cfg.enforce_eager),
        # Sampling in PyTorch, as the vLLM backend samples (VLLM_USE_FLASHINFER_SAMPLER=0): flashinfer's sampling
        # kernels are compiled at first use, which needs nvcc on the GPU machine and minutes per fresh cache.
        sampling_backend="pytorch",
        **engine_placement(placement, seed),
    )
    if dummy_weights:
        kwargs["load_format"] = "dummy"  # model.init=random: the trainer's weights arrive by the first sync
    kwargs.update(extra_engine_kwargs(rollout_cfg))
    return kwargs


class SGLangRollout(RolloutBackend):
    """`rollout_cfg` keys: tensor_model_parallel_size, gpu_memory_utilization, enforce_eager (no CUDA graphs),
    free_cache_engine (release the engine's memory while training runs). Per-call seeds are not passed on:
    SGLang honours a request's seed only with deterministic inference on, which is slower; the engine is
    seeded once (`trainer.seed` + the engine's index)."""

    def __init__(self, model_path: str, tokenizer, rollout_cfg, *, dtype: str = "bfloat16", seed: int = 0,
                 max_model_len: int | None = None, dummy_weights: bool = False):
        check_install()
        check_architecture(model_path)
        import sglang

        kwargs = engine_kwargs(model_path, rollout_cfg, EnginePlacement.current(rollout_cfg.tensor_model_parallel_size),
                               dtype=dtype, seed=seed, max_model_len=max_model_len, dummy_weights=dummy_weights)
        self._attach(sglang.Engine(**kwargs), tokenizer, can_sleep=kwargs["enable_memory_saver"], dtype=dtype)

    @classmethod
    def from_engine(cls, engine, tokenizer, *, can_sleep: bool, dtype: str = "bfloat16") -> "SGLangRollout":
        """Wrap an engine built elsewhere (benchmarks compare this backend with raw `engine.generate`)."""
        rollout = cls.__new__(cls)
        rollout._attach(engine, tokenizer, can_sleep=can_sleep, dtype=dtype)
        return rollout

    def _attach(self, engine, tokenizer, *, can_sleep: bool, dtype: str) -> None:
        self.engine, self.tokenizer, self.can_sleep = engine, tokenizer, can_sleep
        self.weight_dtype = getattr(torch, dtype) if dtype != "auto" else None  # what the engine holds
        # Where weights are staged for the engine's CUDA IPC; the host only where a stand-in engine runs (CPU tests).
        self.device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
        self.asleep: set[str] = set()  # memory tags released

    def generate(self, prompts: Batch, params: SamplingParams) -> Batch:
        self.wake_up()
        input_ids = unpadded_prompt_ids(prompts.repeat(params.n, interleave=True))  # one request per sample
        outputs = self.engine.generate(input_ids=input_ids, sampling_params=sampling_dict(params, self.tokenizer),
                                       return_logprob=params.log_probs)
        token_ids = [list(out["output_ids"]) for out in outputs]
        log_probs = [[entry[0] for entry in out["meta_info"]["output_token_logprobs"]] if params.log_probs else []
                     for out in outputs]
        return rollout_from_token_lists(prompts, token_ids, log_probs, self.tokenizer.pad_token_id, params.n)

    def generate_ids(self, prompt_ids: list[list[int]], params: SamplingParams, max_new_tokens: list[int],
                     stop: tuple[str, ...] = ()) -> list[Completion]:
        self.wake_up()
        # no_stop_trim: a stop string stays in the sample, as the policy chose its tokens.
        stop_kwargs = {"stop": list(stop), "no_stop_trim": True} if stop else {}
        per_request = [{**sampling_dict(params, self.tokenizer), "max_new_tokens": budget, **stop_kwargs}
                       for budget in max_new_tokens]
        outputs = self.engine.generate(input_ids=prompt_ids, sampling_params=per_request,
                                       return_logprob=params.log_probs)
        return [Completion(list(out["output_ids"]),
                           [entry[0] for entry in out["meta_info"]["output_token_logprobs"]] if params.log_probs else [])
                for out in outputs]

    def load_weights(self, weights: Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]]) -> None:
        """Hand the trained weights (HF names) to the engine: a state dict, or (name, tensor) pairs. They go
        over in chunks of at most WEIGHT_SYNC_CHUNK_BYTES, on the device and in the engine's dtype, since
        SGLang's scheduler opens them through CUDA IPC (a host tensor would be pickled whole)."""
        self._resume([WEIGHTS])
        pairs = weights.items() if isinstance(weights, Mapping) else weights
        for chunk in _chunked(pairs, WEIGHT_SYNC_CHUNK_BYTES):
            named = [(name, t.to(device=self.device, dtype=self.weight_dtype if t.is_floating_point() else None))
                     for name, t in chunk]
            self.engine.update_weights_from_tensor(named_tensors=named, flush_cache=False)
        self.engine.flush_cache()  # cached prefixes were computed with the old weights

    def sleep(self) -> None:
        awake = [tag for tag in MEMORY_TAGS if tag not in self.asleep]
        if self.can_sleep and awake:
            self.engine.release_memory_occupation(tags=awake)
            self.asleep.update(awake)

    def wake_up(self) -> None:
        self._resume(list(MEMORY_TAGS))

    def _resume(self, tags: list[str]) -> None:
        """Weights alone before a sync, so the incoming weights never meet a KV cache in memory."""
        asleep = [tag for tag in tags if tag in self.asleep]
        if asleep:
            if torch.cuda.is_available():
                torch.cuda.empty_cache()  # blocks the training step freed go back to the driver first
            self.engine.resume_memory_occupation(tags=asleep)
            self.asleep -= set(asleep)


def sampling_dict(params: SamplingParams, tokenizer) -> dict:
    """SGLang's sampling parameters: temperature 0 is greedy there too; top_k -1 means no top-k."""
    return {"max_new_tokens": params.max_new_tokens, "stop_token_ids": [tokenizer.eos_token_id],
            "temperature": params.temperature, "top_p": params.top_p, "top_k": params.top_k or -1}


def _chunked(items: Iterable[tuple[str, torch.Tensor]], max_bytes: int):
    """Lists of (name, tensor) of at most `max_bytes` each (a larger single tensor goes alone)."""
    chunk, size = [], 0
    for name, tensor in items:
        nbytes = tensor.numel() * tensor.element_size()
        if chunk and size + nbytes > max_bytes:
            yield chunk
            chunk, size = [], 0
        chunk.append((name, tensor))
        size += nbytes
    if chunk:
        yield chunk
