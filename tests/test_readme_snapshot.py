"""core/leaderboard/readme_snapshot.py: the README block shows each table of TABLES, in order, with its own rows."""

from core.leaderboard import readme_snapshot


def board(model: str, rows: list[tuple[str, int, float]]) -> dict:
    figure = {"mean": 0.0, "std": 0.01}
    return {"before_after": {
        "before": {model: {readme_snapshot.SUITE: 0.1, readme_snapshot.GSM8K: 0.0}},
        "rows": [{"model": model, "recipe": recipe, "rank": rank, "seeds": 3, "steps": [16, 16],
                  readme_snapshot.SUITE: {**figure, "mean": mean}, readme_snapshot.GSM8K: figure}
                 for recipe, rank, mean in rows]}}


def test_each_table_in_order_with_its_title_link_and_rows():
    first = board("m", [("gspo", 1, 0.25), ("grpo_passk", 2, 0.15)])
    second = board("m", [("rloo", 1, 0.4)])
    text = readme_snapshot.render_snapshot([(first, "results/a", "Table A"), (second, "results/b", "Table B")])
    assert text.index("**Table A**") < text.index("| gspo | 1 | 0.100 → 0.250 ± 0.010 |") \
        < text.index("| grpo_passk | 2 | 0.100 → 0.150 ± 0.010 |") < text.index("**Table B**") \
        < text.index("| rloo | 1 | 0.100 → 0.400 ± 0.010 |")
    assert "[results/b/leaderboard.md](results/b/leaderboard.md)" in text
    readme = "x\n<!-- BEGIN leaderboard-snapshot -->\nold\n<!-- END leaderboard-snapshot -->\ny\n"
    updated = readme_snapshot.updated_readme(readme, [(second, "results/b", "Table B")])
    assert "old" not in updated and updated.startswith("x\n") and updated.endswith("-->\ny\n") and "rloo" in updated


def test_the_readme_leads_with_the_table_that_ranks():
    assert readme_snapshot.TABLES[0][0] == "results/reasoning_gym_open_80/reasoning_gym_open"
    ranks = {row["rank"] for row in readme_snapshot.committed_boards()[0][0]["before_after"]["rows"]} - {None}
    assert len(ranks) >= 3  # the reason it leads: its tests separate three groups of recipes


def test_a_one_seed_row_shows_no_spread_and_no_rank():
    # A row of one seed has no std and is in no test (the leaderboard writes "± n/a" and rank "—").
    one = board("m", [("grpo_passk", None, 0.154)])
    one["before_after"]["rows"][0][readme_snapshot.SUITE]["std"] = None
    text = readme_snapshot.render_snapshot([(one, "results/a", "Table A")])
    assert "| grpo_passk | — | 0.100 → 0.154 ± n/a | 0.000 → 0.000 ± 0.010 | 3 | 16 |" in text
