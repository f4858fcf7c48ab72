"""Each committed leaderboard is exactly what `recipezoo leaderboard report --from-export` makes of its export(s)."""

import json
from pathlib import Path

import pytest

from core.cli import main

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "results"
# The tiny-task table (with the GSM8K section from SmolLM2), and GPU runs' tables of their own (another budget,
# backend or suite).
TINY = "results/leaderboard/gsm8k_smollm2"
BOARDS = [TINY, *(f"results/leaderboard/{name}" for name in (
    "gsm8k_coder", "sglang_gsm8k", "gsm8k_grpo_long", "reasoning_gym", "reasoning_gym_long", "reasoning_gym_open",
    "reasoning_gym_open_long", "reasoning_gym_open_80", "reasoning_gym_open_160", "reasoning_gym_open_schedules",
    "reasoning_gym_open_coder", "reasoning_gym_open_coder_lr2e-5", "gsm8k_coder_lr5e-6", "gsm8k_coder_t1.0",
    "gsm8k_coder_mb16", "gsm8k_coder_t1.0_mb16")), "results/tool_use"]


@pytest.mark.parametrize("board", BOARDS)
def test_committed_leaderboard_regenerates_from_the_committed_export(board, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)  # the markdown quotes the export path as given: relative, like the committed one
    folder = REPO / board
    # The exports it was made from (the tiny tasks' export, plus e.g. a GPU run's before -> after export).
    sources = json.loads((folder / "leaderboard.json").read_text())["source"].split()
    if board == TINY:
        assert sources[0] == f"{TINY}/tiny_runs.json"
    assert main(["leaderboard", "report", "--from-export", *sources, "--out", str(tmp_path)]) == 0
    for name in ("leaderboard.csv", "leaderboard.json"):
        assert (tmp_path / name).read_text() == (folder / name).read_text(), name
    # The markdown names its output folder in the "regenerate" hint; everything else must match.
    regenerated = (tmp_path / "leaderboard.md").read_text().replace(f"--out {tmp_path}", f"--out {board}")
    assert regenerated == (folder / "leaderboard.md").read_text()
    if board == TINY:
        assert (tmp_path / "curves_arithmetic.png").stat().st_size > 10_000
