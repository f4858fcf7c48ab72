"""Schedules at equal cost (issue 38) on the GSM8K leaderboard driver, on CPU:

- the driver's jobs and row names per --schedule / --rollout-correction, each job's schedule keys;
- a recipe that cannot run off-policy, or a job wider than the GPUs given, refused before anything starts;
- disaggregated jobs take idle GPU pairs;
- the export's step clock, and the schedule table's wall-clock, speed-up and interval check by hand;
- one real one_step_off run through the driver (tiny model, HF rollout).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from core.config import load_config
from core.leaderboard.board import build_leaderboard, render_json
from core.leaderboard.export import export_runs, load_export
from core.leaderboard.schedules import RunSchedule, schedule_lines, schedule_rows, write_schedule_plots
from tests.test_gsm8k_leaderboard import evals_of, train_run

REPO = Path(__file__).resolve().parent.parent

from bench.leaderboard import driver, job_runner  # noqa: E402


def test_schedule_rows_are_named_and_get_their_schedule_keys(tmp_path):
    args = driver.parse_args(["--recipes", "grpo", "--seeds", "0", "--schedule", "sync", "one_step_off", "async",
                              "--rollout-correction", "none", "tis", "--max-staleness", "3"])
    jobs = driver.wanted_jobs(args)
    assert [job.name for job in jobs] == ["grpo-seed0", "grpo-one_step_off-seed0", "grpo-one_step_off-tis-seed0",
                                          "grpo-async-s3-seed0", "grpo-async-s3-tis-seed0"]
    common = driver.run_overrides(args, tmp_path / "data", "file:///store", 2048)
    configs = {}
    for job in jobs:
        command = driver.job_command(job, args, common, tmp_path / "out", 1024, None)
        assert command[command.index("--name") + 1] == job.row
        configs[job.row] = load_config("grpo", command[command.index("--") + 1:])
    sync = configs["grpo"]  # the recipe's ordinary run: no schedule key passed
    assert (sync.trainer.schedule, sync.algorithm.rollout_correction.mode) == ("sync", "none")
    assert configs["grpo-one_step_off-tis"].trainer.schedule == "one_step_off"
    assert configs["grpo-one_step_off-tis"].algorithm.rollout_correction.mode == "tis"
    assert (configs["grpo-async-s3"].trainer.max_staleness, configs["grpo-async-s3"].trainer.controller) == (3, "local")
    split = driver.parse_args(["--recipes", "grpo", "--seeds", "1", "--schedule", "sync", "async", "--partial-rollout",
                               "--placement", "disaggregated", "--gpus-per-job", "2"])
    sync_job, async_job = driver.wanted_jobs(split)
    assert (sync_job.name, sync_job.schedule.gpus) == ("grpo-seed1", 1)
    assert (async_job.name, async_job.schedule.gpus) == ("grpo-async-partial-disagg1+1-seed1", 2)
    command = driver.job_command(async_job, split, common, tmp_path / "out", 1024, None)
    config = load_config("grpo", command[command.index("--") + 1:])
    assert (config.trainer.controller, config.trainer.placement, config.trainer.rollout_workers,
            config.trainer.n_gpus_per_node, config.trainer.partial_rollout) == ("ray", "disaggregated", 1, 1, True)
    assert "--gpu-lock" not in command  # its GPUs are its own
    # The name is read back from the params the run logs: the suffix of one is the suffix of the other.
    params = {f"trainer.{key}": str(config.trainer[key]) for key in ("schedule", "max_staleness", "partial_rollout",
                                                                      "placement", "rollout_workers", "n_gpus_per_node")}
    assert RunSchedule.from_params(params) == async_job.schedule


@pytest.mark.parametrize("argv, message", [
    (["--recipes", "grpo", "remax", "--schedule", "sync", "one_step_off"], "algorithm.adv_estimator='remax'"),
    (["--recipes", "dapo", "--schedule", "async"], "algorithm.filter_groups.enable=True"),
    (["--recipes", "gspo", "--schedule", "async", "--rollout-correction", "tis"], "actor.policy_loss=gspo"),
    (["--recipes", "grpo", "--schedule", "async", "--placement", "disaggregated", "--gpus-per-job", "2",
      "--gpus", "0"], "a job needs 2 GPUs and --gpus 0 gives 1"),
    (["--recipes", "grpo", "--schedule", "async", "--placement", "disaggregated", "--gpus-per-job", "4",
      "--gpus", "0,1,2,3"], r"data.train_batch_size=64 must be divisible by the number of ranks \(3\)"),
])
def test_what_cannot_run_is_refused_before_the_model_is_fetched(argv, message, monkeypatch):
    def fetch(_model):
        raise AssertionError("the model was fetched before the schedules were checked")

    monkeypatch.setattr("core.models.loading.resolve_model_path", fetch)
    with pytest.raises(SystemExit, match=message) as refused:
        driver.main(argv)
    assert "\n" not in str(refused.value)  # one line


def test_flags_that_no_job_reads_are_refused():
    for argv in (["--gpus-per-job", "2"], ["--rollout-correction", "tis"], ["--max-staleness", "2"],
                 ["--schedule", "async", "--placement", "disaggregated", "--gpus-per-job", "2", "--rollout-gpus", "2"]):
        with pytest.raises(SystemExit):
            driver.parse_args(argv)


def test_disaggregated_jobs_take_idle_gpus_and_hold_them():
    one = SimpleNamespace(gpu="0")
    pair = SimpleNamespace(gpu="2,3")
    gpus = ["0", "1", "2", "3"]
    assert job_runner.free_gpus(2, [], gpus, 2) == "0,1"
    assert job_runner.free_gpus(2, [one], gpus, 2) == "1,2"  # a GPU with a job on it is not idle
    assert job_runner.free_gpus(2, [one, pair], gpus, 2) is None
    assert job_runner.free_gpus(1, [one, pair], gpus, 2) == "1"  # least busy, never a pair's GPU
    assert job_runner.free_gpus(1, [one, SimpleNamespace(gpu="1"), pair], gpus, 1) is None


# ---- the export's clock and the schedule table, by hand ----------------------------------------------------------

def test_the_export_clocks_each_step_from_the_first_step_s_start(tmp_path, monkeypatch):
    import mlflow
    from mlflow.entities import Metric, Param

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    client = mlflow.MlflowClient(tmp_path.as_uri())
    run = client.create_run(client.create_experiment("e"), tags={"recipe": "grpo-one_step_off"})
    # Step 1 took 4 s and was logged at t = 10 s: the first step started at 6 s. Step 2 logged at 15 s: 9 s in.
    client.log_batch(run.info.run_id, metrics=[Metric("timing_s/step", 4.0, 10_000, 1),
                                               Metric("timing_s/step", 5.0, 15_000, 2)],
                     params=[Param("trainer.schedule", "one_step_off")])
    client.set_terminated(run.info.run_id)
    (exported,) = export_runs(tmp_path.as_uri(), "e")["runs"]
    assert exported["step_clock"] == [[1, 4.0], [2, 9.0]]
    assert exported["params"]["trainer.schedule"] == "one_step_off"


def schedule_export() -> dict:
    """grpo (sync), grpo-one_step_off and grpo-one_step_off-tis, 3 seeds each: GSM8K strict after training and the
    seconds to the last step (step_clock's last point) chosen by hand."""
    rows = {"grpo": ({}, (0.40, 0.42, 0.44), (300, 330, 360)),
            "grpo-one_step_off": ({"trainer.schedule": "one_step_off"}, (0.41, 0.43, 0.45), (190, 200, 210)),
            "grpo-one_step_off-tis": ({"trainer.schedule": "one_step_off", "algorithm.rollout_correction.mode": "tis"},
                                      (0.30, 0.31, 0.32), (140, 150, 160))}
    runs, evals = [], evals_of("before", "before", 0.1)
    for recipe, (params, accuracies, walls) in rows.items():
        for seed, (accuracy, wall) in enumerate(zip(accuracies, walls)):
            run = train_run(recipe, seed, **params)
            run["step_clock"] = [[step, wall * step / 25] for step in range(1, 26)]
            runs.append(run)
            evals += evals_of(f"{recipe}-{seed}", "after", accuracy, recipe, run["run_id"])
    return {"schema": 1, "experiment": "gsm8k-leaderboard", "runs": runs, "evals": evals}


def test_speed_up_and_the_sync_interval_by_hand(tmp_path):
    section = build_leaderboard(schedule_export()).before_after
    found = {row.recipe: row for row in schedule_rows(section.rows, section.columns)}
    assert list(found) == ["grpo", "grpo-one_step_off", "grpo-one_step_off-tis"]  # sync first
    sync, off, tis = found.values()
    # sync: 0.40, 0.42, 0.44 -> mean 0.42, std 0.02, t(2) = 4.303: half-width 4.303 · 0.02 / √3 = 0.049687
    assert sync.accuracy.interval == pytest.approx((0.42 - 0.049687, 0.42 + 0.049687), abs=1e-6)
    assert (off.base, off.sync, tis.sync) == ("grpo", sync, sync)
    assert (sync.wall.mean, off.wall.mean, tis.wall.mean) == pytest.approx((330, 200, 150))
    assert off.speedup == pytest.approx(1.65) and tis.speedup == pytest.approx(2.2)  # 330 / 200, 330 / 150
    assert off.within_sync_interval is True and tis.within_sync_interval is False  # 0.43 inside, 0.31 below 0.370
    markdown = "\n".join(schedule_lines(section.rows, section.columns, "plots/schedules.png"))
    # s/step: 25 steps each, 200 / 25 = 8.00 ± 10 / 25 = 0.40
    assert ("| grpo-one_step_off | one_step_off | 3 | 0.430 ± 0.020 [0.380, 0.480] | yes | 1 | 200 ± 10 | 8.00 ± 0.40 "
            "| 1.65× |") in markdown
    assert ("| grpo-one_step_off-tis | one_step_off, tis | 3 | 0.310 ± 0.010 [0.285, 0.335] | no | 1 | 150 ± 10 | "
            "6.00 ± 0.40 | 2.20× |") in markdown
    assert ("- grpo-one_step_off against grpo: openai/gsm8k mean@1 (strict) 0.430, within grpo's 95% interval "
            "[0.370, 0.470]; 1.65× the speed (8.00 ± 0.40 s a step against 13.20 ± 1.20 s): the claim (same "
            "accuracy, ≥ 1.6× less wall-clock per GPU) holds.") in markdown
    assert "- grpo-one_step_off-tis against grpo: openai/gsm8k mean@1 (strict) 0.310, outside" in markdown
    assert markdown.count("does not hold") == 1
    records = json.loads(render_json(build_leaderboard(schedule_export()), "runs.json"))
    claims = {entry["recipe"]: entry["claim_holds"] for entry in records["before_after"]["schedules"][train_run(
        "grpo", 0)["model"]]}
    assert claims == {"grpo": None, "grpo-one_step_off": True, "grpo-one_step_off-tis": False}
    # A disaggregated row of 2 GPUs at 150 s costs 300 GPU-seconds: 330 / 300 = 1.10x, not the wall-clock's 2.2x.
    tis.schedule = RunSchedule("one_step_off", "tis", rollout_gpus=1, training_gpus=1)
    assert tis.speedup == pytest.approx(1.1)
    (plot,) = write_schedule_plots(section, tmp_path)
    assert plot == tmp_path / "plots" / "schedules.png" and plot.stat().st_size > 0


def test_a_run_stopped_early_counts_by_its_seconds_a_step():
    """A time budget stopped every one_step_off run after 20 of 25 steps: its wall-clock is shorter, not its speed."""
    export = schedule_export()
    for run in export["runs"]:
        if run["recipe"] == "grpo-one_step_off":
            run["step_clock"] = run["step_clock"][:20]  # 20 steps in 200 · 20/25 = 160 s (seed 1): 8 s a step
    section = build_leaderboard(export).before_after
    off = {row.recipe: row for row in schedule_rows(section.rows, section.columns)}["grpo-one_step_off"]
    assert off.wall.mean == pytest.approx(160)  # the wall-clock ratio would say 330 / 160 = 2.06x
    assert off.speedup == pytest.approx(1.65)   # 13.2 s a step (330 / 25) over 8.0 (160 / 20)


def test_one_schedule_adds_nothing_to_the_section():
    export = schedule_export()
    export["runs"] = [run for run in export["runs"] if run["recipe"] == "grpo"]
    export["evals"] = [e for e in export["evals"] if e["recipe"] in (None, "grpo")]
    section = build_leaderboard(export).before_after
    assert schedule_rows(section.rows, section.columns) == [] and write_schedule_plots(section, Path("/nowhere")) == []
    assert "schedules" not in json.loads(render_json(build_leaderboard(export), "x"))["before_after"]


# ---- the driver end to end ----------------------------------------------------------------------------------------

def test_one_step_off_through_the_driver_on_cpu(tmp_path, random_model_dir):
    """One GRPO run under one_step_off, 2 steps, the HF rollout on CPU, 2 problems per eval set: its row is
    grpo-one_step_off, its params say so, and its steps are clocked."""
    from tests.test_gsm8k_driver import tiny_benchmarks

    out = tmp_path / "out"
    command = [sys.executable, "-m", "core.cli", "leaderboard", "run", "--model", random_model_dir,
               "--data-dir", str(tiny_benchmarks(tmp_path / "data")), "--out", str(out), "--gpus", "cpu",
               "--recipes", "grpo", "--seeds", "0", "--schedule", "one_step_off", "--steps", "2", "--prompts", "2",
               "--n", "2", "--mini-batch", "2", "--max-response", "8", "--max-prompt", "64", "--val-samples", "2",
               "--test-freq", "0", "--rollout", "hf", "--eval-limit", "2", "--eval-max-tokens", "8", "--",
               "trainer.device=cpu", "trainer.num_threads=1"]
    env = {**os.environ, "PYTHON": sys.executable, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (run,) = load_export(out / "runs.json")["runs"]
    assert (run["recipe"], run["steps"], run["params"]["trainer.schedule"]) == ("grpo-one_step_off", 2, "one_step_off")
    assert [step for step, _ in run["step_clock"]] == [1, 2] and 0 < run["step_clock"][0][1] < run["step_clock"][1][1]
