"""How the leaderboard writes what it shows: markdown tables, a row's steps, and the rounding of its records.

Every page, section and README block goes through these, so a cell reads the same in all of them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

RULES = {"l": "---|", "r": "---:|"}


def md_cell(text: Any) -> str:
    """A table cell's text: a `|` inside it would end the cell."""
    return str(text).replace("|", "\\|")


def table_row(cells: Iterable[Any]) -> str:
    return "| " + " | ".join(md_cell(cell) for cell in cells) + " |"


def markdown_table(header: list[str], align: str, rows: Iterable[Iterable[Any]]) -> list[str]:
    """The header as given, its rule from `align` (one letter a column: `l` or `r` for right-aligned numbers), then
    one line a row."""
    if len(align) != len(header):
        raise ValueError(f"{len(header)} columns but {len(align)} alignments ({align!r})")
    return ["| " + " | ".join(header) + " |", "|" + "".join(RULES[side] for side in align),
            *(table_row(row) for row in rows)]


def steps_text(steps: Iterable[int], dash: str = "–") -> str:
    """The steps a row's runs made: `25`, or `18–25` where a time budget stopped some early (`-` in csv/json)."""
    steps = sorted(steps)
    if not steps:
        return "?"
    return str(steps[0]) if steps[0] == steps[-1] else f"{steps[0]}{dash}{steps[-1]}"


def round6(value: float | None) -> float | None:
    """Six digits in leaderboard.json and .csv: the shown figures reproduce, float noise does not churn diffs."""
    return None if value is None else round(value, 6)
