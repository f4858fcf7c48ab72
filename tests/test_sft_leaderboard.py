"""The GSM8K leaderboard's SFT stage (bench/leaderboard/sft_first.py, sft_stage.py): SFT, then GRPO from the
pretrained and the SFT weights, into one MLflow store and one table with a section per starting point.

Real parts on CPU: the tiny random Qwen3, `recipezoo sft`, `recipezoo merge`, the driver's job processes with the
HF rollout and real MLflow file stores; the GSM8K files are arithmetic stand-ins the tiny model can spell
(tests/test_gsm8k_driver.py's)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.leaderboard import bookkeeping, driver, sft_first, sft_stage
from core.leaderboard.export import load_export
from tests.test_gsm8k_driver import tiny_benchmarks

REPO = Path(__file__).resolve().parent.parent

RECORD = {"base_model": "base", "base_model_sha256": "b" * 64, "sft_run_id": "0123456789abcdef",
          "sft_command": "sft --recipe sft", "sft_steps": 2, "sft_batch": 4, "sft_lr": 1e-5, "model_dir": "/m/sft",
          "sft_model_sha256": "s" * 64}


def test_each_job_again_from_the_sft_model_with_its_model_and_hash_in_place_of_the_base():
    args = driver.parse_args(["--recipes", "grpo", "--seeds", "0", "1", "--eval-before", "--gpus", "cpu"])
    jobs = sft_stage.with_sft_jobs(driver.wanted_jobs(args), RECORD)
    assert [job.name for job in jobs] == ["pretrained", "grpo-seed0", "grpo-seed1", "sft", "sft+grpo-seed0",
                                          "sft+grpo-seed1"]
    assert [job.row for job in jobs] == [None, "grpo", "grpo", None, "sft+grpo", "sft+grpo"]
    assert {job.eval_model for job in jobs[3:]} == {"base + SFT run 01234567"}
    common = ["model.path=base", "+tracking.tags.model_sha256=" + "b" * 64, "actor.lr=1e-05"]
    assert sft_stage.sft_job_overrides(jobs[1], common, RECORD) == common
    sft_common = sft_stage.sft_job_overrides(jobs[4], common, RECORD)
    assert "model.path=base" not in sft_common and "model.path=/m/sft" in sft_common
    assert "+tracking.tags.model_sha256=" + "s" * 64 in sft_common and "actor.lr=1e-05" in sft_common
    assert "+tracking.tags.sft_base_model_sha256=" + "b" * 64 in sft_common
    assert sft_stage.sft_job_args(jobs[4], RECORD) == ["--eval-model", "base + SFT run 01234567",
                                                       "--model-sha256", "s" * 64]
    assert sft_stage.with_sft_jobs(jobs[:3], None) == jobs[:3]


def test_an_sft_model_from_another_base_or_without_its_record_is_refused_in_one_line(tmp_path, random_model_dir,
                                                                                    capsys):
    out = tmp_path / "out"
    flags = ["--model", random_model_dir, "--gpus", "cpu", "--out", str(out), "--only", "grpo:0"]
    with pytest.raises(SystemExit, match=f"--sft-model {tmp_path}: no recipezoo_sft.json in it"):
        driver.main([*flags, "--sft-model", str(tmp_path)])
    (tmp_path / sft_stage.SFT_RECORD).write_text(json.dumps(RECORD))
    with pytest.raises(SystemExit, match=r"trained from base \(sha256 bbbbbbbbbbbb…\), not --model"):
        driver.main([*flags, "--sft-model", str(tmp_path)])
    with pytest.raises(SystemExit):
        sft_first.main(["--sft-steps", "0", *flags])
    assert "error: --sft-steps 0: expected a count of at least 1" in capsys.readouterr().err
    assert not out.exists()  # nothing written, no store


def test_sft_then_grpo_from_both_starting_points_on_cpu(tmp_path, random_model_dir):
    """SFT (2 steps), its export, then the pretrained and the SFT model evaluated and GRPO (2 steps) from each:
    one store holding the SFT run and both sections, the jobs from the SFT weights tagged with their hash, and a
    rerun resuming (SFT skipped, every job skipped). Minutes on a shared 2-core machine: five processes import
    torch and transformers."""
    out, data = tmp_path / "out", tiny_benchmarks(tmp_path / "data")
    command = [sys.executable, "-m", "core.cli", "leaderboard", "sft-first", "--sft-steps", "2", "--sft-batch", "4",
               "--sft-override", "trainer.device=cpu", "--sft-override", "trainer.num_threads=1",
               "--model", random_model_dir, "--data-dir", str(data), "--out", str(out), "--gpus", "cpu",
               "--runs-per-gpu", "2", "--recipes", "grpo", "--seeds", "0", "--eval-before", "--steps", "2",
               "--prompts", "4", "--n", "2", "--mini-batch", "2", "--max-response", "24", "--max-prompt", "64",
               "--val-samples", "4", "--test-freq", "2", "--rollout", "hf", "--eval-limit", "2",
               "--eval-max-tokens", "8", "--", "trainer.device=cpu", "trainer.num_threads=1"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    record = json.loads((out / "sft-model" / sft_stage.SFT_RECORD).read_text())
    from core.models.identity import model_sha256

    assert record["base_model_sha256"] == model_sha256(random_model_dir) != record["sft_model_sha256"]
    assert record["sft_model_sha256"] == model_sha256(out / "sft-model")
    assert "data.response_key=extra_info.answer" in record["sft_command"]
    export = load_export(out / "runs.json")
    runs = {run["recipe"]: run for run in export["runs"]}
    assert sorted(runs) == ["grpo", "sft+grpo"] and all(run["steps"] == 2 for run in runs.values())
    assert runs["sft+grpo"]["model"] == str(out / "sft-model") and runs["grpo"]["model"] == random_model_dir
    assert runs["sft+grpo"]["tags"]["model_sha256"] == record["sft_model_sha256"]
    assert runs["sft+grpo"]["tags"]["sft_run"] == record["sft_run_id"]
    label = sft_stage.sft_label(record)
    befores = {entry["model"] for entry in export["evals"] if entry["stage"] == "before"}
    assert befores == {random_model_dir, label}
    board = (out / "leaderboard.md").read_text()
    assert f"pretrained model `{random_model_dir}`" in board and f"pretrained model `{label}`" in board
    assert "| sft+grpo | 1 |" in board and "| grpo | 1 |" in board
    # the pipeline table: each stage's figures are the sections' (the SFT model's before, each row's after)
    assert f"### grpo: `{random_model_dir}` and `{label}` (SFT run {record['sft_run_id']})" in board
    from core.leaderboard.board import build_leaderboard

    section = build_leaderboard(export).before_after
    column = next(c for c in section.columns if c.grader == "strict")
    stages = {line.split(" | ")[0].strip("| "): line.split(" | ") for line in board.splitlines()
              if line.startswith(("| pretrained |", "| SFT |", "| SFT + grpo |", "| grpo |"))
              and len(line.split(" | ")) == len(section.columns) + 1}
    where = 1 + section.columns.index(column)
    assert stages["SFT"][where].strip(" |") == f"{section.befores[label][column]:.3f}"
    assert stages["pretrained"][where].strip(" |") == f"{section.befores[random_model_dir][column]:.3f}"
    sft_row = next(row for row in section.rows if row.recipe == "sft+grpo")
    assert stages["SFT + grpo"][where].strip(" |") == sft_row.after(column).text()

    again = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "skipping the SFT stage" in again.stdout and "nothing to do" in again.stdout

    results = tmp_path / "results"
    assert bookkeeping.merge_outputs([out], results, table="sft/gsm8k_tiny") == 0
    table = results / "sft" / "gsm8k_tiny"
    readme = (table / "README.md").read_text()
    assert f"MLflow run {record['sft_run_id']}" in readme and record["base_model_sha256"][:12] in readme
    assert "| sft+grpo | 1 |" in (table / "leaderboard.md").read_text()


def test_the_pipeline_table_pairs_an_sft_row_with_the_rl_row_of_its_base_file():
    """Hand-made figures, each stage a different one: the table puts each where it belongs, pairs `sft+grpo`
    with the `grpo` row whose model file is the SFT's base (by hash, not by name), and leaves RL blank when no
    row is from that file."""
    from core.leaderboard.before_after import BeforeAfter, EvalRow, RecipeRow
    from core.leaderboard.eval_columns import EvalColumn
    from core.leaderboard.sft_pipeline import render_sft_pipeline

    strict = EvalColumn("openai/gsm8k", "mean@1", "strict")

    def row(recipe, model, tags, values):
        return RecipeRow(recipe, model, [EvalRow(recipe, model, {"tags": tags}, after={strict: v}) for v in values])

    sft_tags = {"sft_base_model_sha256": "b" * 64, "sft_run": "run1", "model_sha256": "s" * 64}
    rows = [row("grpo", "base", {"model_sha256": "b" * 64}, [0.2, 0.4]),
            row("grpo", "other", {"model_sha256": "o" * 64}, [0.9]),
            row("sft+grpo", "base + SFT", sft_tags, [0.5, 0.7])]
    section = BeforeAfter([strict], {}, {"base": {strict: 0.1}, "base + SFT": {strict: 0.3}, "other": {strict: 0.8}},
                          rows)
    text = "\n".join(render_sft_pipeline(section))
    assert "### grpo: `base` and `base + SFT` (SFT run run1)" in text
    assert "| pretrained | 0.100 |" in text and "| SFT | 0.300 |" in text
    assert f"| SFT + grpo | {rows[2].after(strict).text()} |" in text and "0.600 ± 0.141" in text
    assert f"| grpo | {rows[0].after(strict).text()} |" in text and "0.300 ± 0.141" in text
    assert "0.900" not in text and "0.800" not in text  # the row from another file is no part of it
    section.rows = [rows[1], rows[2]]  # no RL row from the SFT's base file yet
    text = "\n".join(render_sft_pipeline(section))
    assert "| pretrained | — |" in text and "| grpo | — |" in text and "| SFT | 0.300 |" in text
    assert render_sft_pipeline(BeforeAfter([strict], {}, {"base": {strict: 0.1}}, rows[:2])) == []
