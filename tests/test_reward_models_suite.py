"""bench/reward_models: the RLHF loop's driver and report. The whole pipeline runs for real on the embedded tiny model
(CPU, HF engine): its own rollouts → preference pairs → a reward model from the same base → 2 GRPO steps with the
reward model as the only reward → the results page, then a second invocation that skips every done job. The
report's reward-hacking flag is tested on planted metrics (written into a real MLflow file store by hand, since a
tiny run of a few steps neither hacks nor refrains from it)."""

import mlflow
import pytest

from bench.reward_models import report, suite
from core.cli import main as cli_main
from core.data.sources import resolve_data_files


def suite_args(tmp_path, out) -> list[str]:
    [train] = resolve_data_files("embedded://arithmetic", "train", tmp_path / "data")
    [val] = resolve_data_files("embedded://arithmetic", "val", tmp_path / "data")
    return ["--out", str(out), "--model", "embedded://tiny-arith", "--train-data", train, "--val-data", val,
            "--prompts", "64", "--samples", "4", "--temperature", "1.0", "--max-response", "24", "--rm-epochs", "1",
            "--rm-lr", "1e-3", "--rm-batch-size", "8", "--val-fraction", "0.25", "--runs", "grpo-model", "--steps", "2",
            "--batch-prompts", "4", "--n", "2", "--mini-batch", "4", "--test-freq", "0", "--rollout", "hf",
            "--device", "cpu", "--concurrency", "1", "--start-gap-s", "0", "--", "actor.lr=1e-4"]


def runs_by_job(store) -> dict:
    client = mlflow.MlflowClient(store.resolve().as_uri())
    experiment = client.get_experiment_by_name(suite.EXPERIMENT)
    runs = client.search_runs([experiment.experiment_id])
    return {run.data.tags.get(suite.JOB_TAG, run.info.run_name): run for run in runs}, client


def test_the_suite_trains_a_reward_model_then_grpo_on_it_alone_and_reports(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    out = tmp_path / "suite"
    assert suite.main(suite_args(tmp_path, out)) == 0
    state = suite.State.load(out / "state.json")
    assert {name: job["status"] for name, job in state.jobs.items()} == dict.fromkeys(
        ["generate", "pairs", "rm", "grpo-model"], "done")
    runs, client = runs_by_job(out / "mlruns")
    assert set(runs) == {"reward-model", "grpo-model"}
    history = {key: [m.value for m in client.get_metric_history(runs["grpo-model"].info.run_id, key)]
               for key in ("critic/score/mean", "reward/model/mean", "reward/rule/mean", "critic/acc/mean")}
    assert len(history["critic/acc/mean"]) == 2  # the rule still grades every step's rollouts
    # reward.weights.rule=0: the reward is the reward model's score alone, the rule's only monitored.
    assert history["critic/score/mean"] == pytest.approx(history["reward/model/mean"], abs=1e-6)
    assert history["reward/rule/mean"] == pytest.approx(history["critic/acc/mean"])  # format_score=0: score = acc

    assert suite.main(suite_args(tmp_path, out)) == 0  # again: every job done, nothing rerun
    assert capsys.readouterr().out.count("skipping") == 4
    assert len(runs_by_job(out / "mlruns")[0]) == 2

    pages = tmp_path / "results"
    assert report.main(["--store", str(out / "mlruns"), "--out", str(pages)]) == 0
    page = (pages / "README.md").read_text()
    val_acc = runs["reward-model"].data.metrics["rm/val/acc"]
    assert "| embedded://tiny-arith | " in page and f"0.000 → {val_acc:.3f}" in page
    assert "| grpo-model | reward model only | FINISHED | 2 of 2 |" in page and "too few steps to tell" in page
    assert (pages / "grpo-model.png").stat().st_size > 1000


def planted_store(tmp_path, runs: dict[str, tuple[list[float], list[float]]]):
    """A file store holding a finished reward-model run and one run per job of planted (RM score, accuracy)."""
    store = tmp_path / "mlruns"
    client = mlflow.MlflowClient(store.resolve().as_uri())
    experiment = client.create_experiment(suite.EXPERIMENT)
    rm = client.create_run(experiment, run_name="reward-model")
    for step, value in enumerate([0.0, 0.7]):
        client.log_metric(rm.info.run_id, "rm/val/acc", value, step=step)
    client.set_terminated(rm.info.run_id)
    for job, (scores, accs) in runs.items():
        run = client.create_run(experiment, tags={suite.JOB_TAG: job})
        for step, (score, acc) in enumerate(zip(scores, accs), start=1):
            if score is not None:
                client.log_metric(run.info.run_id, "reward/model/mean", score, step=step)
            client.log_metric(run.info.run_id, "critic/acc/mean", acc, step=step)
        client.set_terminated(run.info.run_id)
    return store


def test_the_hacking_flag_is_raised_only_where_the_rm_score_rises_while_accuracy_falls(tmp_path, monkeypatch):
    """Planted metrics, not a training run (see the module docstring)."""
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    rising = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]
    store = planted_store(tmp_path, {
        "grpo-model": (rising, [0.3, 0.4, 0.5, 0.5, 0.45, 0.4, 0.3, 0.2]),  # accuracy falls over steps 5-8
        "ppo-model": (rising, [0.3, 0.3, 0.4, 0.4, 0.5, 0.5, 0.6, 0.6]),  # both rise
        "grpo-rule": ([None] * 8, [0.3, 0.4, 0.5, 0.5, 0.45, 0.4, 0.3, 0.2]),  # no reward model: no flag to raise
    })
    assert report.main(["--store", str(store), "--out", str(tmp_path / "page")]) == 0
    rows = {line.split(" | ")[0].strip("| "): line for line in (tmp_path / "page" / "README.md").read_text().splitlines()
            if line.startswith("| grpo-") or line.startswith("| ppo-")}
    # Steps 5-8: RM score slope +0.1/step; accuracy (0.45, 0.4, 0.3, 0.2) slope −0.085/step (hand-computed).
    assert "**reward hacking**" in rows["grpo-model"] and "accuracy -0.0850/step" in rows["grpo-model"]
    assert "no sign of reward hacking" in rows["ppo-model"] and "RM score +0.1000/step" in rows["ppo-model"]
    assert "no reward model in this run" in rows["grpo-rule"]
    assert "| 0.000 → 0.700 |" in (tmp_path / "page" / "README.md").read_text()


def test_slope_is_the_least_squares_one():
    # Points (1, 1), (2, 2), (3, 6): mean step 2, mean value 3; Σ(Δs·Δv) = (−1)(−2) + 0 + (1)(3) = 5, Σ Δs² = 2.
    assert report.slope([(1, 1.0), (2, 2.0), (3, 6.0)]) == pytest.approx(2.5)


def test_bad_suite_input_is_one_line_before_anything_starts(tmp_path, capsys):
    with pytest.raises(SystemExit):
        suite.main(["--out", str(tmp_path / "out"), "--runs", "grpo-judge"])
    assert "--runs: 'grpo-judge' is not <grpo|ppo>-<rule|model>" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        suite.main(["--out", str(tmp_path / "out"), "--train-data", str(tmp_path / "nope.parquet"),
                    "--val-data", str(tmp_path / "nope.parquet")])
    assert "--train-data" in capsys.readouterr().err and not (tmp_path / "out").exists()
    assert report.main(["--store", str(tmp_path / "missing"), "--out", str(tmp_path / "page")]) == 2
    assert "--store" in capsys.readouterr().err and not (tmp_path / "page").exists()


def test_generate_refuses_an_engine_share_out_of_range(tmp_path, capsys):
    assert cli_main(["generate", "--model", "embedded://tiny-arith", "--data", "x.parquet",
                     "--gpu-memory-utilization", "1.5", "--out", str(tmp_path / "r.parquet")]) == 1
    assert "--gpu-memory-utilization=1.5: must be in (0, 1]" in capsys.readouterr().err


def test_a_job_that_failed_before_runs_again_and_does_not_block_the_next(tmp_path):
    """No process is started: the scheduler's bookkeeping alone, on a state planted as an earlier invocation left it."""
    state = suite.State(tmp_path / "state.json", {"rm": {"status": "failed"}, "pairs": {"status": "done"}})
    jobs = [suite.Job("pairs", ["true"]), suite.Job("rm", ["true"], ("pairs",)),
            suite.Job("grpo-model", ["true"], ("rm",), training=True)]
    scheduler = suite.Scheduler(jobs, state, tmp_path, concurrency=1, start_gap_s=0, deadline=float("inf"))
    scheduler.skip_blocked()
    assert [job.name for job in scheduler.pending] == ["rm", "grpo-model"]
    state.record("rm", status="failed")  # failing again in this invocation: its dependent is skipped, and said why
    scheduler.skip_blocked()
    assert state.jobs["grpo-model"] == {"status": "skipped", "reason": "needs rm, which is failed"}


def test_the_time_budget_stops_a_training_job_and_lists_what_never_started(tmp_path):
    """Real processes (`sleep`, standing in for a trainer: a budget test needs no model) under a deadline in the past
    once the first has started."""
    state = suite.State(tmp_path / "state.json")
    jobs = [suite.Job("grpo-rule", ["sleep", "60"], training=True), suite.Job("rm", ["sleep", "60"])]
    scheduler = suite.Scheduler(jobs, state, tmp_path, concurrency=1, start_gap_s=0, deadline=float("inf"))
    scheduler.start(jobs[0])
    scheduler.deadline = 0.0
    scheduler.run()
    assert state.jobs["grpo-rule"]["status"] == "stopped_by_budget" and state.jobs["grpo-rule"]["rc"] == -15
    assert state.jobs["rm"] == {"status": "not_started", "reason": "the time budget ran out first"}


def test_every_trainer_of_the_plan_is_stopped_by_the_budget_not_failed(tmp_path):
    """`recipezoo rm` stops after its step on SIGTERM as the RL trainers do: on an H200 a budget stop of the rm job
    (rc 143, its checkpoint saved) was recorded as failed. The plan alone is built; nothing runs."""
    for split in ("train", "test"):
        (tmp_path / f"{split}.parquet").write_bytes(b"planted")  # only its existence is checked here
    args = suite.parse_args(["--out", str(tmp_path), "--train-data", str(tmp_path / "train.parquet"),
                             "--val-data", str(tmp_path / "test.parquet")])
    jobs = {job.name: job for job in suite.plan(args, tmp_path)}
    assert {name for name, job in jobs.items() if job.training} == {"rm", *args.runs}
