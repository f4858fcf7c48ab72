"""The leaderboard against a real MLflow sqlite store: export, mean ± std, protocols, determinism, CLI."""

from __future__ import annotations

import copy
import json

import mlflow
import pytest
from mlflow.entities import Metric, Param

from core.cli import main
from core.leaderboard.board import build_leaderboard, write_leaderboard
from core.leaderboard.export import LeaderboardError, export_runs, load_export, save_export, steady_seconds

PROTOCOL = {
    "data.val_files": "embedded://arithmetic", "data.val_max_samples": "256", "rollout.val_n": "1",
    "rollout.val_temperature": "0.0", "rollout.top_p": "1.0", "model.path": "embedded://tiny-arith",
    "trainer.total_steps": "4",
}
START = 1_700_000_000_000  # ms
# recipe -> (seed, final held-out acc, wall seconds); rloo logs no rollout/generated_tokens.
RUNS = {
    "grpo": [(0, 0.5, 60), (1, 0.6, 120), (2, 0.7, 180)],
    "rloo": [(0, 0.7, 100), (1, 0.8, 100), (2, 0.9, 100)],
    "remax": [(0, 0.4, 30)],
}


def log_run(client, experiment_id, recipe, seed, final_acc, wall, status="FINISHED", params=None):
    tags = {"seed": str(seed)} | ({"recipe": recipe} if recipe else {})
    run = client.create_run(experiment_id, start_time=START, tags=tags, run_name=f"{recipe}-s{seed}")
    run_id = run.info.run_id
    params = {**PROTOCOL, "algorithm.adv_estimator": recipe or "grpo", "trainer.seed": str(seed), **(params or {})}
    metrics = [Metric("val/arithmetic/acc", 0.2, START, 0), Metric("val/arithmetic/acc", final_acc - 0.1, START, 2),
               Metric("val/arithmetic/acc", final_acc, START, 4), Metric("val/arithmetic/score", final_acc, START, 4),
               Metric("val/acc", final_acc, START, 4)]
    for step in (1, 2, 3, 4):
        metrics.append(Metric("critic/score/mean", round(0.1 * step + 0.01 * seed, 2), START, step))
        if recipe != "rloo":
            metrics.append(Metric("rollout/generated_tokens", 100.0, START, step))
    client.log_batch(run_id, metrics=metrics, params=[Param(k, v) for k, v in params.items()])
    client.set_terminated(run_id, status=status, end_time=START + wall * 1000)
    return run_id


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """`zoo`: 3 recipes (3, 3, 1 seeds) + a FAILED and an untagged run; `zoo-mixed`: two protocols."""
    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"
    client = mlflow.MlflowClient(uri)
    zoo = client.create_experiment("zoo")
    for recipe, runs in RUNS.items():
        for seed, acc, wall in runs:
            log_run(client, zoo, recipe, seed, acc, wall)
    log_run(client, zoo, "grpo", 9, 0.0, 10, status="FAILED")
    log_run(client, zoo, None, 5, 0.99, 10)
    mixed = client.create_experiment("zoo-mixed")
    same = log_run(client, mixed, "grpo", 0, 0.5, 60)
    odd = log_run(client, mixed, "grpo", 1, 0.9, 60,
                  params={"rollout.val_temperature": "0.6", "data.val_max_samples": "64"})
    return {"uri": uri, "same": same, "odd": odd}


@pytest.fixture(scope="module")
def export(store):
    return export_runs(store["uri"], "zoo")


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # relative paths as a user types them: results/runs.json
    return tmp_path


def test_export_keeps_finished_tagged_runs_with_their_protocol_and_sizes(export):
    runs = export["runs"]
    assert [(r["recipe"], r["seed"]) for r in runs] == [
        ("grpo", 0), ("grpo", 1), ("grpo", 2), ("remax", 0), ("rloo", 0), ("rloo", 1), ("rloo", 2)]
    grpo1 = runs[1]
    assert grpo1["model"] == "embedded://tiny-arith" and grpo1["steps"] == 4
    assert grpo1["wall_seconds"] == 120.0
    assert grpo1["generated_tokens"] == 400 and runs[4]["generated_tokens"] == 0  # rloo logs none
    assert grpo1["params"]["rollout.val_temperature"] == "0.0"
    assert grpo1["params"]["data.val_max_samples"] == "256"
    assert grpo1["final"] == {"val/arithmetic/acc": 0.6, "val/arithmetic/score": 0.6, "val/acc": 0.6}
    assert grpo1["history"]["val/arithmetic/acc"] == [[0, 0.2], [2, 0.5], [4, 0.6]]
    assert grpo1["history"]["critic/score/mean"] == [[1, 0.11], [2, 0.21], [3, 0.31], [4, 0.41]]


def test_export_keeps_dapos_sampling_history(tmp_path):
    client = mlflow.MlflowClient(uri := f"sqlite:///{tmp_path / 'mlflow.db'}")
    run_id = log_run(client, client.create_experiment("dapo"), "dapo", 0, 0.5, 60)
    client.log_batch(run_id, metrics=[Metric("dapo/kept_group_ratio", ratio, START, step) for step, ratio in
                                      ((1, 0.5), (2, 0.25))] + [Metric("dapo/num_gen_batches", 4.0, START, 2)])
    history = export_runs(uri, "dapo")["runs"][0]["history"]
    assert history["dapo/kept_group_ratio"] == [[1, 0.5], [2, 0.25]] and history["dapo/num_gen_batches"] == [[2, 4.0]]


def test_export_round_trips_as_stable_json(export, tmp_path):
    path = save_export(export, tmp_path / "runs.json")
    assert load_export(path) == export
    text = path.read_text()
    assert "[4, 0.6]" in text  # one history point per line
    save_export(load_export(path), tmp_path / "again.json")
    assert (tmp_path / "again.json").read_bytes() == path.read_bytes()


def test_cell_is_mean_std_over_seeds_and_rows_sorted_best_first(export, in_tmp):
    write_leaderboard(export, "results", export_path="results/runs.json")
    md = (in_tmp / "results/leaderboard.md").read_text()
    table = [line for line in md.splitlines() if line.startswith("| ") and " acc |" not in line
             and "protocol" not in line and line.count("|") > 3]
    assert table == [
        "| rloo | embedded://tiny-arith | 0.800 ± 0.100 (3) | 0.200 | 3 | 4 | 1m40s | 0 |",
        "| grpo | embedded://tiny-arith | 0.600 ± 0.100 (3) | 0.200 | 3 | 4 | 2m00s | 400 |",
        "| remax | embedded://tiny-arith | 0.400 ± n/a (1) | 0.200 | 1 | 4 | 30s | 400 |",
    ]
    assert "Generated by `recipezoo leaderboard report` from `results/runs.json`" in md
    for line in ("| dataset | arithmetic (embedded://arithmetic) |", "| split | test |",
                 "| samples | first 256 prompts × 1 response each |", "| temperature | 0 (greedy) |",
                 "| top-p | 1 |", "| grader | gsm8k strict `#### N` |"):
        assert line in md
    board = json.loads((in_tmp / "results/leaderboard.json").read_text())
    assert board["columns"][0]["protocol"]["temperature"] == "0 (greedy)"
    assert board["rows"][1]["arithmetic/acc_mean"] == 0.6 and board["rows"][1]["arithmetic/acc_std"] == 0.1
    csv_lines = (in_tmp / "results/leaderboard.csv").read_text().splitlines()
    assert csv_lines[0].startswith("recipe,model,arithmetic/acc_mean,arithmetic/acc_std,arithmetic/acc_n,"
                                   "arithmetic/acc_step0_mean,seeds")  # step 0: the first logged point, 0.2
    assert csv_lines[3].startswith("remax,embedded://tiny-arith,0.4,,1,0.2,1,4,30.0,400.0,")


def test_protocol_mismatch_raises_naming_runs_and_keys(store, in_tmp):
    mixed = export_runs(store["uri"], "zoo-mixed")
    with pytest.raises(LeaderboardError) as error:
        build_leaderboard(mixed)
    message = str(error.value)
    assert "val/arithmetic/acc" in message and store["odd"] in message and store["same"] in message
    assert "differ in samples, temperature" in message and "rollout.val_temperature" in message
    assert "'0.6'" in message and "'0 (greedy)'" in message
    # The CLI reports it and writes nothing, so a committed export is never replaced by a bad one.
    assert main(["leaderboard", "report", "--uri", store["uri"], "--experiment", "zoo-mixed"]) == 1
    assert not (in_tmp / "results").exists()


def test_a_seed_logged_twice_is_an_error(export):
    doubled = copy.deepcopy(export)
    doubled["runs"].append({**doubled["runs"][0], "run_id": "rerun"})
    with pytest.raises(LeaderboardError, match="seed 0: runs .*, rerun"):
        build_leaderboard(doubled)


def test_cli_from_mlflow_then_from_export_is_byte_identical(store, in_tmp):
    assert main(["leaderboard", "report", "--uri", store["uri"], "--experiment", "zoo"]) == 0
    table = "results/leaderboard/gsm8k_smollm2"  # the defaults: the tiny-task table and its export
    results = in_tmp / table
    names = ["tiny_runs.json", "leaderboard.md", "leaderboard.csv", "leaderboard.json", "curves_arithmetic.png"]
    first = {name: (results / name).read_bytes() for name in names}
    assert first["curves_arithmetic.png"].startswith(b"\x89PNG") and b"matplotlib" not in first["curves_arithmetic.png"]

    assert main(["leaderboard", "report", "--from-export", f"{table}/tiny_runs.json", "--out", table]) == 0
    assert {name: (results / name).read_bytes() for name in names} == first
    assert main(["leaderboard", "report", "--from-export", f"{table}/tiny_runs.json", "--out", "elsewhere"]) == 0
    for name in ("leaderboard.csv", "leaderboard.json", "curves_arithmetic.png"):
        assert (in_tmp / "elsewhere" / name).read_bytes() == first[name]


def test_cli_names_a_missing_experiment_and_export(store, in_tmp, capsys):
    assert main(["leaderboard", "report", "--uri", store["uri"], "--experiment", "nope"]) == 1
    assert "no MLflow experiment 'nope'" in capsys.readouterr().err
    assert main(["leaderboard", "report", "--from-export", "missing.json"]) == 1
    assert "missing.json does not exist" in capsys.readouterr().err


def test_cli_adds_a_new_stores_runs_to_the_committed_export(store, in_tmp, capsys):
    # The committed export holds one grpo run of zoo-mixed; zoo's 7 finished, tagged runs are added to it.
    committed = export_runs(store["uri"], "zoo-mixed")
    committed["runs"] = [run for run in committed["runs"] if run["run_id"] == store["same"]]  # one protocol
    save_export(committed, in_tmp / "committed.json")
    committed = load_export(in_tmp / "committed.json")
    assert main(["leaderboard", "report", "--uri", store["uri"], "--experiment", "zoo", "--export", "committed.json",
                 "--add-to-export"]) == 1  # grpo seed 0 twice: the committed run and zoo's
    assert "grpo" in capsys.readouterr().err and load_export(in_tmp / "committed.json") == committed
    committed["runs"][0]["seed"] = "7"  # now a seed zoo lacks
    save_export(committed, in_tmp / "committed.json")
    assert main(["leaderboard", "report", "--uri", store["uri"], "--experiment", "zoo", "--export", "committed.json",
                 "--add-to-export"]) == 0
    merged = load_export(in_tmp / "committed.json")
    assert len(merged["runs"]) == 1 + 7 and merged["experiment"] == "zoo-mixed, zoo"
    assert store["same"] in {run["run_id"] for run in merged["runs"]}
    # Adding the same store again adds only runs finished since (none): no seed is counted twice.
    assert main(["leaderboard", "report", "--uri", store["uri"], "--experiment", "zoo", "--export", "committed.json",
                 "--add-to-export"]) == 0
    assert load_export(in_tmp / "committed.json") == merged


def test_steady_step_time_is_the_median_after_the_first_step():
    # The first step (12 s here) pays compilation; the rest: 4, 6, 5 → median 5; two left: their mean.
    assert steady_seconds([12.0, 4.0, 6.0, 5.0]) == 5.0
    assert steady_seconds([12.0, 4.0, 7.0]) == 5.5
    assert steady_seconds([12.0]) is None and steady_seconds([]) is None
