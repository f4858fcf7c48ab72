"""core/leaderboard/readme_snapshot.py: each page's block shows its tables of PAGES, in order, with their own rows."""

from core.leaderboard import readme_snapshot
from core.leaderboard.readme_snapshot import Table


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
    text = readme_snapshot.render_snapshot([(first, Table("results/a", "Table A")), (second, Table("results/b", "Table B"))])
    assert text.index("**Table A**") < text.index("| gspo | 1 | 0.100 → 0.250 ± 0.010 |") \
        < text.index("| grpo_passk | 2 | 0.100 → 0.150 ± 0.010 |") < text.index("**Table B**") \
        < text.index("| rloo | 1 | 0.100 → 0.400 ± 0.010 |")
    assert "[results/b/leaderboard.md](results/b/leaderboard.md)" in text
    readme = "x\n<!-- BEGIN leaderboard-snapshot -->\nold\n<!-- END leaderboard-snapshot -->\ny\n"
    updated = readme_snapshot.updated_page(readme, [(second, Table("results/b", "Table B"))])
    assert "old" not in updated and updated.startswith("x\n") and updated.endswith("-->\ny\n") and "rloo" in updated


def test_a_page_in_docs_links_each_full_table_from_its_own_folder():
    text = readme_snapshot.render_snapshot([(board("m", [("rloo", 1, 0.4)]), Table("results/b", "Table B"))],
                                           page="docs/leaderboard.md")
    assert "[results/b/leaderboard.md](../results/b/leaderboard.md)" in text


def test_the_readme_shows_the_headline_and_the_docs_page_every_table():
    assert readme_snapshot.PAGES == {"README.md": readme_snapshot.HEADLINE, "docs/leaderboard.md": readme_snapshot.TABLES}
    assert readme_snapshot.TABLES[:len(readme_snapshot.HEADLINE)] == readme_snapshot.HEADLINE  # in the README's order
    assert len(readme_snapshot.HEADLINE) < len(readme_snapshot.TABLES)


def test_the_readme_shows_the_table_that_ranks():
    open_80 = "results/leaderboard/reasoning_gym_open_80"
    assert open_80 in [table.folder for table in readme_snapshot.HEADLINE]
    (ranked, _), = readme_snapshot.committed_boards([Table(open_80, "")])
    ranks = {row["rank"] for row in ranked["before_after"]["rows"]} - {None}
    assert len(ranks) >= 3  # the reason it is shown: its tests separate three groups of recipes


def test_a_table_names_its_own_columns_and_a_row_without_a_rank_shows_none():
    # A table of another suite (GSM8K trained, say) shows its own before → after columns; a row with no rank key reads —.
    gsm8k = board("m", [("grpo", None, 0.3)])
    del gsm8k["before_after"]["rows"][0]["rank"]
    table = Table("results/g", "GSM8K", columns=(("GSM8K strict", readme_snapshot.GSM8K),))
    text = readme_snapshot.render_snapshot([(gsm8k, table)])
    assert "| recipe | rank | GSM8K strict | seeds | steps |\n|---|---:|---:|---:|---:|" in text
    assert "| grpo | — | 0.000 → 0.000 ± 0.010 | 3 | 16 |" in text


def test_a_one_seed_row_shows_no_spread_and_no_rank():
    # A row of one seed has no std and is in no test (the leaderboard writes "± n/a" and rank "—").
    one = board("m", [("grpo_passk", None, 0.154)])
    one["before_after"]["rows"][0][readme_snapshot.SUITE]["std"] = None
    text = readme_snapshot.render_snapshot([(one, Table("results/a", "Table A"))])
    assert "| grpo_passk | — | 0.100 → 0.154 ± n/a | 0.000 → 0.000 ± 0.010 | 3 | 16 |" in text


def test_the_committed_pages_are_fresh():
    assert readme_snapshot.main(["--check"]) == 0, "run: python -m core.leaderboard.readme_snapshot"
