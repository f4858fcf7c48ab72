"""What the bench report scripts share: reading the json files a suite wrote, writing the markdown page generated
from them (its tables, its targets met or missed) and drawing its plots with matplotlib, into files only.

A suite's report is then its own rows and words: `load_results(folder.glob("<suite>_*.json"))`, lines built
with `table_header` and one f-string per row, `write_page(folder / "README.md", lines)`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

PLOT_DPI = 120


def load_results(paths: Iterable[Path]) -> list[dict]:
    """The json files at `paths`, in file-name order: a glob's own order is the file system's, and a page made
    from the same files must come out the same on every machine."""
    return [json.loads(path.read_text()) for path in sorted(paths)]


def write_page(path: Path, lines: list[str]) -> Path:
    """The generated page: `lines`, each ended by a newline."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def table_header(*columns: str, right_aligned: tuple[str, ...] = ()) -> list[str]:
    """A markdown table's column names and the rule under them; `right_aligned` names the columns of numbers
    that should line up by their last digit."""
    rule = "|" + "".join("---:|" if column in right_aligned else "---|" for column in columns)
    return [table_row(columns), rule]


def table_row(cells: Iterable[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def number_cell(value: float | None, spec: str = ".1f") -> str:
    """A measured number as a table cell; "–" where the run did not measure it."""
    return "–" if value is None else format(value, spec)


def target_verdict(value: float, target: float, shortfall: str = "{:.1%}") -> str:
    """"met" where `value` reaches `target`, else how far below it (`shortfall` formats target − value)."""
    return "met" if value >= target else "missed by " + shortfall.format(target - value)


def pyplot():
    """matplotlib.pyplot on its file-only backend: a GPU node or a CI runner has no display."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_plot(fig, path: Path, rect: tuple[float, float, float, float] | None = None) -> str:
    """Lay `fig` out (inside `rect`, the figure's fraction left free of a legend below it), write it and free
    it; returns the file name, which the page links."""
    fig.tight_layout(rect=rect)
    fig.savefig(path, dpi=PLOT_DPI)
    pyplot().close(fig)
    return path.name


def stacked_barh(ax, bars: list[tuple[str, dict[str, float]]], stages: tuple[str, ...], **tick_style) -> None:
    """One horizontal bar per (label, seconds by stage), the first at the bottom, its `stages` stacked left to
    right, each stage in one colour with one legend entry; a stage a bar lacks takes no room in it."""
    for y, (_, seconds) in enumerate(bars):
        left = 0.0
        for index, stage in enumerate(stages):
            width = max(seconds.get(stage, 0.0), 0.0)
            ax.barh(y, width, left=left, color=f"C{index}", label=stage if y == 0 else None)
            left += width
    ax.set_yticks(range(len(bars)), [label for label, _ in bars], **tick_style)
