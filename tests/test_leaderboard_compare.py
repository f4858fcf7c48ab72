"""`recipezoo leaderboard compare`: one recipe's curves from committed tables of different budgets in one plot,
and a bad series refused in one line before anything is drawn."""

from pathlib import Path

import pytest

from core.cli import main

REPO = Path(__file__).resolve().parent.parent
T07 = "results/leaderboard/gsm8k_coder/runs.json"
T10 = "results/leaderboard/gsm8k_coder_t1.0/runs.json"


def test_two_tables_of_different_budgets_make_one_plot(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(REPO)
    out = tmp_path / "compare.png"
    assert main(["leaderboard", "compare", f"T 0.7={T07}:grpo", f"T 1.0={T10}:grpo", "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 20_000
    assert f"wrote {out}" in capsys.readouterr().out


@pytest.mark.parametrize(("series", "message"), [
    ("no label or recipe", "expected LABEL=RUNS_JSON:RECIPE"),
    ("x=missing/runs.json:grpo", "no export at missing/runs.json"),
    (f"x={T07}:ppo", "no runs of recipe 'ppo' (it has grpo, reinforce_pp, rloo)"),
])
def test_a_bad_series_is_one_line_naming_it_and_nothing_is_written(series, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(REPO)
    out = tmp_path / "compare.png"
    assert main(["leaderboard", "compare", f"T 1.0={T10}:grpo", series, "--out", str(out)]) == 1
    error = capsys.readouterr().err.strip()
    assert message in error and len(error.splitlines()) == 1
    assert not out.exists()
