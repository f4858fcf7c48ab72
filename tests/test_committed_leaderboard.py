"""The committed leaderboard is exactly what `recipezoo leaderboard --from-export` makes of the export(s)."""

import json
from pathlib import Path

from core.cli import main

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "results"


def test_committed_leaderboard_regenerates_from_the_committed_export(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)  # the markdown quotes the export path as given: relative, like the committed one
    # The exports it was made from (results/runs.json, plus e.g. a GPU run's before -> after export).
    sources = json.loads((RESULTS / "leaderboard.json").read_text())["source"].split()
    assert sources[0] == "results/runs.json"
    assert main(["leaderboard", "--from-export", *sources, "--out", str(tmp_path)]) == 0
    for name in ("leaderboard.csv", "leaderboard.json"):
        assert (tmp_path / name).read_text() == (RESULTS / name).read_text(), name
    # The markdown names its output folder in the "regenerate" hint; everything else must match.
    regenerated = (tmp_path / "leaderboard.md").read_text().replace(f"--out {tmp_path}", "--out results")
    assert regenerated == (RESULTS / "leaderboard.md").read_text()
    assert (tmp_path / "curves_arithmetic.png").stat().st_size > 10_000
