"""bench/common/results_page.py: what the bench report scripts share (json in, markdown page and plots out)."""

import json

from bench.common.results_page import (  # noqa: E402
    load_results,
    number_cell,
    pyplot,
    stacked_barh,
    table_header,
    target_verdict,
    write_page,
)


def test_load_results_reads_in_file_name_order(tmp_path):
    for name in ("b.json", "a.json", "c.json"):
        (tmp_path / name).write_text(json.dumps({"name": name}))
    assert [r["name"] for r in load_results(tmp_path.glob("*.json"))] == ["a.json", "b.json", "c.json"]


def test_write_page_makes_its_folder_and_ends_each_line(tmp_path):
    path = write_page(tmp_path / "new" / "README.md", ["# Title", "", "1 × 2 – 3"])
    assert path.read_text(encoding="utf-8") == "# Title\n\n1 × 2 – 3\n"


def test_table_header_right_aligns_the_named_columns():
    assert table_header("job", "steps", "s/step", right_aligned=("steps",)) == ["| job | steps | s/step |",
                                                                                "|---|---:|---|"]


def test_cells_and_verdicts():
    assert number_cell(None) == "–" and number_cell(2.25) == "2.2" and number_cell(0.4, ".0%") == "40%"
    assert target_verdict(0.95, 0.95) == "met"
    assert target_verdict(0.90, 0.95) == "missed by 5.0%"
    assert target_verdict(1.2, 1.5, "{:.2f}×") == "missed by 0.30×"


def test_stacked_barh_stacks_stages_in_order_and_a_missing_stage_takes_no_room():
    fig, ax = pyplot().subplots()
    stacked_barh(ax, [("a", {"gen": 2.0, "update": 3.0}), ("b", {"update": 1.0})], ("gen", "update"))
    bars = [(round(p.get_y() + p.get_height() / 2), p.get_x(), p.get_width()) for p in ax.patches]
    assert bars == [(0, 0.0, 2.0), (0, 2.0, 3.0), (1, 0.0, 0.0), (1, 0.0, 1.0)]
    assert [text.get_text() for text in ax.get_yticklabels()] == ["a", "b"]
    assert ax.get_legend_handles_labels()[1] == ["gen", "update"]  # one entry a stage, not one a bar
    pyplot().close(fig)
