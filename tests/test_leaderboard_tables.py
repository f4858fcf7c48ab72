"""core/leaderboard/tables.py: the one markdown table writer and the one way a row's steps read."""

import pytest

from core.leaderboard.tables import markdown_table, round6, steps_text


def test_a_table_escapes_pipes_in_cells_and_right_aligns_the_numbers():
    assert markdown_table(["recipe", "acc"], "lr", [["a|b", 0.5]]) == ["| recipe | acc |", "|---|---:|",
                                                                       "| a\\|b | 0.5 |"]


def test_a_table_refuses_an_alignment_per_column_that_does_not_match_the_header():
    with pytest.raises(ValueError, match="2 columns but 3"):
        markdown_table(["recipe", "acc"], "lrr", [])


def test_steps_read_as_one_number_a_range_or_unknown():
    assert steps_text([25, 25]) == "25"
    assert steps_text([25, 18, 20]) == "18–25"
    assert steps_text({18, 25}, "-") == "18-25"
    assert steps_text([]) == "?"


def test_records_keep_six_digits():
    assert round6(0.12345678) == 0.123457
    assert round6(None) is None
