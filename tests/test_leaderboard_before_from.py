"""`--merge ... --before-from RUNS_JSON`: a table of another budget takes its *before* from a committed export of the
same model file (bench/leaderboard/bookkeeping.py), on the committed 160- and 80-step open-suite exports."""

import json
import shutil
from pathlib import Path

import pytest

from bench.leaderboard.bookkeeping import merge_outputs
from bench.leaderboard.suites import SUITES
from core.leaderboard.export import load_export, save_export

REPO = Path(__file__).resolve().parent.parent
LONG = REPO / "results/leaderboard/reasoning_gym_open_160"
SHORT_EXPORT = REPO / "results/leaderboard/reasoning_gym_open_80/runs.json"
SUITE = SUITES["reasoning-gym-open"]


def out_dir_of_the_long_runs(tmp_path: Path) -> Path:
    """The 160-step runs as the driver's --out leaves them: their export without any pretrained evaluation."""
    export = load_export(LONG / "runs.json")
    export["evals"] = [entry for entry in export["evals"] if entry["stage"] != "before"]
    out = tmp_path / "open160"
    shutil.copytree(LONG / "invocations", out / "invocations")
    save_export(export, out / "runs.json")
    return out


def test_the_table_takes_the_pretrained_evaluation_of_the_same_model_file(tmp_path):
    results = tmp_path / "results"
    assert merge_outputs([out_dir_of_the_long_runs(tmp_path)], results, suite=SUITE, before_from=SHORT_EXPORT) == 0
    target = results / SUITE.results_dir
    board = (target / "leaderboard.md").read_text()
    committed = next(line for line in (LONG / "leaderboard.md").read_text().splitlines() if line.startswith("| rloo |"))
    recipe_seeds_mean = "|".join(committed.split("|")[:4])
    assert " 0.073 → " in recipe_seeds_mean and recipe_seeds_mean in board  # without it: "— → ..."
    befores = [entry for entry in load_export(target / "runs.json")["evals"] if entry["stage"] == "before"]
    assert {entry["run_id"] for entry in befores} == {
        entry["run_id"] for entry in load_export(SHORT_EXPORT)["evals"] if entry["stage"] == "before"}
    assert "taken from" in (target / "README.md").read_text()


def test_a_pretrained_evaluation_of_another_model_file_is_refused_and_nothing_written(tmp_path, capsys):
    other = load_export(SHORT_EXPORT)
    for entry in other["evals"]:
        entry["model_sha256"] = "0" * 64
    save_export(other, tmp_path / "other.json")
    results = tmp_path / "results"
    assert merge_outputs([out_dir_of_the_long_runs(tmp_path)], results, suite=SUITE,
                         before_from=tmp_path / "other.json") == 1
    assert "started from different model files" in capsys.readouterr().out
    assert not results.exists() or not any(results.rglob("*.json"))


def test_an_export_without_a_pretrained_evaluation_is_named(tmp_path):
    (tmp_path / "no_before.json").write_text(json.dumps({**load_export(SHORT_EXPORT), "evals": []}))
    with pytest.raises(SystemExit, match=r"--before-from .*no_before.json: no pretrained-model evaluation"):
        merge_outputs([out_dir_of_the_long_runs(tmp_path)], tmp_path / "results", suite=SUITE,
                      before_from=tmp_path / "no_before.json")


def test_a_table_merged_again_without_before_from_still_names_where_its_before_came_from(tmp_path):
    results = tmp_path / "results"
    assert merge_outputs([out_dir_of_the_long_runs(tmp_path)], results, suite=SUITE, before_from=SHORT_EXPORT) == 0
    table = tmp_path / "table"  # the committed table, given again as an --out dir beside a later invocation's
    shutil.copytree(results / SUITE.results_dir, table)
    again = tmp_path / "again"
    assert merge_outputs([table], again, suite=SUITE) == 0
    note = next(line for line in (again / SUITE.results_dir / "README.md").read_text().splitlines()
                if line.startswith("- The pretrained model's evaluation (*before*): taken from"))
    assert "reasoning_gym_open_80/runs.json`" in note
    names = sorted(entry["run_name"] for entry in load_export(SHORT_EXPORT)["evals"] if entry["stage"] == "before")
    assert f"(runs {', '.join(names)})" in note
