"""LoRA adapters on the policy (Hu et al. 2021, arXiv:2106.09685), injected with PEFT.

The adapters live inside the HF model's own modules (`q_proj` becomes a PEFT `lora.Linear` holding
`base_layer`, `lora_A.default` and `lora_B.default`), so the engine, FSDP2 and the chunked log-prob
head see one model. Its frozen base doubles as the reference policy: with the adapters switched off
(`adapters_disabled`) a forward is exactly the base model's.

Two exports of the trained policy, both from the same parameter names:
- `merged_weights`: HF names and W + (alpha/r)·B·A, what a plain HF model or vLLM loads;
- `write_adapter_dir`: a PEFT adapter dir (adapter_config.json + adapter_model.safetensors), what
  `PeftModel.from_pretrained` and vLLM's LoRA support load.

`LoraSpec` is also the LoRA side of the policy's adapter seam (core/models/adapter.py): the engine, the
workers and the rollout ask it what trains, syncs and is saved, as they ask `FULL_WEIGHTS` without LoRA.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterable

import torch

from core.config import ConfigError

ADAPTER_NAME = "default"  # PEFT's name for a model's only adapter
PEFT_PREFIX = "base_model.model."  # how PEFT's saved adapter files name the model's modules
# The chunked log-prob head reads lm_head's weight directly (core.engine.policy_model): an adapter there
# would never run, so it is refused rather than silently untrained.
UNSUPPORTED_TARGETS = ("lm_head",)


@dataclass(frozen=True)
class LoraSpec:
    """`actor.lora.*`, and the base model the adapters belong to (what `recipezoo merge` rebuilds)."""

    rank: int
    alpha: float
    dropout: float
    target_modules: str | tuple[str, ...]  # "all-linear" or module names (`q_proj`, ...)
    base: dict = field(default_factory=dict, compare=False)  # path, init, seed, gguf_file, trust_remote_code
    sync: str = "merged"  # actor.lora.sync: merged (W + BA into the engine) or adapter (the engine serves it)

    @classmethod
    def from_config(cls, lora_cfg, base: dict | None = None) -> LoraSpec:
        """`actor.lora.*` with a rank set (core.models.adapter.policy_adapter: none set is full weights). A
        config slice without `sync` (the memory plan's) gets base.yaml's default."""
        targets = lora_cfg.target_modules
        targets = targets if isinstance(targets, str) else tuple(targets)
        return cls(int(lora_cfg.rank), float(lora_cfg.alpha), float(lora_cfg.dropout), targets, dict(base or {}),
                   lora_cfg.get("sync", "merged"))

    @classmethod
    def from_dict(cls, data: dict) -> LoraSpec:
        """Inverse of `to_dict`: the spec a checkpoint's `lora.pt` recorded."""
        targets = data["target_modules"]
        return cls(data["rank"], data["alpha"], data["dropout"], targets if isinstance(targets, str) else tuple(targets),
                   dict(data["base"]))

    @property
    def scaling(self) -> float:
        return self.alpha / self.rank

    def peft_config(self):
        peft = import_peft()
        targets = self.target_modules if isinstance(self.target_modules, str) else list(self.target_modules)
        return peft.LoraConfig(r=self.rank, lora_alpha=self.alpha, lora_dropout=self.dropout,
                               target_modules=targets, bias="none", task_type="CAUSAL_LM",
                               base_model_name_or_path=self.base.get("path"))

    def to_dict(self) -> dict:
        """What a checkpoint's `lora.pt` records: the adapters' shape and their base. Not `sync`: how the
        adapters reach the rollout engine is the resuming run's choice, not the checkpoint's."""
        data = asdict(self)
        del data["sync"]
        data["target_modules"] = (self.target_modules if isinstance(self.target_modules, str)
                                  else list(self.target_modules))
        return data

    # ---- the seam's answers for a LoRA policy (FullWeights in core/models/adapter.py gives the trivial ones) ----
    reference_is_base = True  # a KL reference is the actor's own forward with its adapters off
    saves_base = False  # a checkpoint holds the adapters alone: the base is `base`'s weights, unchanged

    @property
    def gradient_checkpointing_kwargs(self) -> dict:
        # Reentrant checkpointing drops the gradients of a block whose inputs need none: with LoRA the
        # frozen embeddings' output needs none, yet the adapters inside the block do.
        return {"use_reentrant": False}

    @property
    def rollout_adapter_rank(self) -> int | None:
        """The rank of the adapter the rollout engine serves itself (`sync=adapter`); None: it loads merged weights."""
        return self.rank if self.sync == "adapter" else None

    def apply_to(self, model: torch.nn.Module, frozen_dtype: torch.dtype | None,
                 tensor_parallel: bool) -> torch.nn.Module:
        """The policy to train: `model` with adapters injected, its frozen base stored in `frozen_dtype` (the
        dtype it computes in under mixed precision anyway; None: as it is)."""
        if tensor_parallel:
            raise ValueError("actor.lora with actor.tensor_parallel_size > 1 is not supported")
        model = add_adapters(model, self)
        if frozen_dtype is not None:
            freeze_base_in(model, frozen_dtype)
        return model

    def base_only(self, model: torch.nn.Module):
        """A context in which `model`'s forward is the base model's alone: the reference policy."""
        return adapters_disabled(model)

    def hf_weights(self, pairs: Iterable[tuple[str, torch.Tensor]], with_adapters: bool = True):
        """(HF name, tensor) from the adapted model's pairs: each adapted layer merged (`merged_weights`)."""
        return merged_weights(pairs, self.scaling, with_adapters)

    def checkpoint_files(self, model_state: dict[str, torch.Tensor]) -> dict:
        """The model's files of a checkpoint (`<role>/<name>.pt`) from its trainable state: the adapters and
        `lora.pt`. A tied lm_head.weight still shows up beside the adapters in that state: dropped."""
        return {"model": {k: v for k, v in model_state.items() if is_adapter_param(k)}, "lora": self.to_dict()}

    def adapter_parameter_count(self, meta_model: Callable[[], torch.nn.Module]) -> int:
        """rank · (in + out) for each linear layer targeted in `meta_model()` (which may build on the meta device)."""
        def targeted(name: str) -> bool:
            last = name.rsplit(".", 1)[-1]
            return last not in UNSUPPORTED_TARGETS if self.target_modules == "all-linear" else last in self.target_modules

        return sum(self.rank * (module.in_features + module.out_features) for name, module in meta_model().named_modules()
                   if isinstance(module, torch.nn.Linear) and targeted(name))


def import_peft():
    try:
        import peft
    except ImportError as error:
        raise ImportError(f"actor.lora.rank is set, which needs PEFT ({error}): pip install peft "
                          "(on CPU: pip install -c constraints-cpu.txt peft). `recipezoo doctor` checks the install."
                          ) from error
    return peft


# ---- which modules --------------------------------------------------------------------------------
def linear_module_names(model: torch.nn.Module) -> list[str]:
    """The distinct last names of the model's linear layers (`q_proj`, ..., `lm_head`)."""
    return sorted({name.rsplit(".", 1)[-1] for name, module in model.named_modules()
                   if isinstance(module, torch.nn.Linear)})


def check_targets(spec: LoraSpec, model: torch.nn.Module) -> None:
    """A target list must name linear layers the model has; one line naming the key and those layers."""
    key, have = "actor.lora.target_modules", linear_module_names(model)
    if isinstance(spec.target_modules, str):
        if spec.target_modules != "all-linear":
            raise ConfigError(f"{key}={spec.target_modules!r} is not a module list — expected all-linear or names "
                              f"of {type(model).__name__}'s linear layers: {have}")
        return
    unknown = [name for name in spec.target_modules if name not in have]
    refused = [name for name in spec.target_modules if name in UNSUPPORTED_TARGETS]
    if not spec.target_modules or unknown:
        raise ConfigError(f"{key}={list(spec.target_modules)}: {unknown or 'an empty list'} matches no linear "
                          f"layer of {type(model).__name__} — it has {have}; name some of them, or all-linear")
    if refused:
        raise ConfigError(f"{key}={list(spec.target_modules)}: LoRA on {refused} is not supported — the log-prob "
                          f"head reads its weight directly; choose from {[n for n in have if n not in refused]}")


# ---- on the training model ------------------------------------------------------------------------
def add_adapters(model: torch.nn.Module, spec: LoraSpec) -> torch.nn.Module:
    """Inject LoRA layers into `model` in place; only the adapters stay trainable (B = 0: the policy
    starts as the base model)."""
    check_targets(spec, model)
    return import_peft().inject_adapter_in_model(spec.peft_config(), model, adapter_name=ADAPTER_NAME)


def freeze_base_in(model: torch.nn.Module, dtype: torch.dtype) -> None:
    """Frozen (base) parameters in `dtype`: bf16 halves their memory, and nothing updates them, so no fp32
    master copy is needed. The trainable adapters keep their fp32 master weights."""
    for param in model.parameters():
        if not param.requires_grad and param.is_floating_point():
            param.data = param.data.to(dtype)


def adapter_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    peft = import_peft()
    return [module for module in model.modules() if isinstance(module, peft.tuners.tuners_utils.BaseTunerLayer)]


@contextmanager
def adapters_disabled(model: torch.nn.Module):
    """Forward passes inside run the base model alone: each LoRA layer returns `base_layer(x)`."""
    layers = adapter_layers(model)
    for layer in layers:
        layer.enable_adapters(False)
    try:
        yield
    finally:
        for layer in layers:
            layer.enable_adapters(True)


def is_adapter_param(name: str) -> bool:
    return ".lora_A." in name or ".lora_B." in name


# ---- exports --------------------------------------------------------------------------------------
def merged_weights(pairs, scaling: float, with_adapters: bool = True):
    """(HF name, tensor) from the LoRA model's (name, tensor) pairs, in their order: W + scaling·B·A for
    each adapted layer (computed in fp32, returned in W's dtype), the base W alone when not
    `with_adapters`, every other tensor as it is. Holds at most one layer's W, A and B at a time."""
    pending: dict[str, dict[str, torch.Tensor]] = {}
    for name, tensor in pairs:
        if is_adapter_param(name):
            if not with_adapters:
                continue
            prefix, rest = name.split(".lora_", 1)
            part = rest[0]  # "A" or "B"
        elif ".base_layer." in name:
            prefix, rest = name.split(".base_layer.", 1)
            if rest != "weight":  # a bias passes through under its HF name
                yield f"{prefix}.{rest}", tensor
                continue
            part = "W"
        else:
            yield name, tensor
            continue
        pieces = pending.setdefault(prefix, {})
        pieces[part] = tensor
        if "W" in pieces and (not with_adapters or ("A" in pieces and "B" in pieces)):
            del pending[prefix]
            yield f"{prefix}.weight", _merge(pieces, scaling)
    if pending:
        raise ValueError(f"incomplete LoRA layers (missing base weight or adapter): {sorted(pending)}")


def _merge(pieces: dict[str, torch.Tensor], scaling: float) -> torch.Tensor:
    weight = pieces["W"]
    if "A" not in pieces:
        return weight
    delta = pieces["B"].float() @ pieces["A"].float()  # (out, r) @ (r, in)
    return (weight.float() + scaling * delta).to(weight.dtype)


def merge_adapter_into(base_state: dict[str, torch.Tensor], adapter_state: dict[str, torch.Tensor],
                       scaling: float) -> dict[str, torch.Tensor]:
    """A plain HF state dict with each adapted layer's W replaced by W + scaling·B·A (`recipezoo merge`)."""
    merged = dict(base_state)
    for name, lora_a in adapter_state.items():
        if ".lora_A." in name:
            prefix = name.split(".lora_A.", 1)[0]
            lora_b = adapter_state[name.replace(".lora_A.", ".lora_B.")]
            merged[f"{prefix}.weight"] = _merge({"W": base_state[f"{prefix}.weight"], "A": lora_a, "B": lora_b}, scaling)
    return merged


def peft_adapter_state(adapter_state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Our parameter names (`model.layers.0.self_attn.q_proj.lora_A.default.weight`) as PEFT saves them
    (`base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight`)."""
    return {PEFT_PREFIX + name.replace(f".{ADAPTER_NAME}.", "."): tensor.contiguous()
            for name, tensor in adapter_state.items()}


def write_adapter_dir(adapter_state: dict[str, torch.Tensor], spec: LoraSpec, out_dir: str | Path,
                      dtype: torch.dtype | None = None) -> Path:
    """A PEFT adapter dir: `PeftModel.from_pretrained(base, out_dir)` and vLLM's LoRARequest load it."""
    from safetensors.torch import save_file

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    state = peft_adapter_state({k: v.to(dtype) if dtype else v for k, v in adapter_state.items()})
    save_file(state, str(out / "adapter_model.safetensors"))
    config = spec.peft_config().to_dict()
    # The layers the adapter covers by name, as PEFT saves an injected adapter (all-linear resolved).
    config["target_modules"] = sorted({name.split(".lora_A.")[0].rsplit(".", 1)[-1] for name in adapter_state
                                       if ".lora_A." in name})
    config = {k: sorted(v) if isinstance(v, set) else v for k, v in config.items()}  # json has no sets
    (out / "adapter_config.json").write_text(json.dumps(config, indent=2, default=str) + "\n")
    return out
