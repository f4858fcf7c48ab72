"""The leaderboard's tool-use section: what RL changed in runs whose rollouts call tools.

Rows of the tiny-task table whose runs logged `val/tool/call_rate` (rollout.multi_turn) get a second table: the
held-out accuracy, the share of held-out episodes that call a tool and the assistant turns per episode, each as
`before → after`. *Before* is the figure at step 0 (the warm-started model, mean over the seeds), *after* the final
one as mean ± std and a 95% t-interval over the seeds (seed_stats.py).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from core.leaderboard.before_after import before_after_cell
from core.leaderboard.export import TOOL_CALL_RATE_KEY, TOOL_TURNS_KEY
from core.leaderboard.seed_stats import SeedStats
from core.leaderboard.tables import markdown_table, round6, steps_text


@dataclass(frozen=True)
class ToolUseSection:
    columns: list[tuple[str, str]]  # (metric key, column title): the task accuracies, then the tool figures
    rows: list                      # core.leaderboard.board.Row, in the tiny-task table's order


def build_tool_use(rows: list, tasks: list[str]) -> ToolUseSection | None:
    """The section of the rows whose runs called tools; None when no row did."""
    tool_rows = [row for row in rows if any(TOOL_CALL_RATE_KEY in run["final"] for run in row.runs)]
    if not tool_rows:
        return None
    columns = [(f"val/{task}/acc", f"{task} acc") for task in tasks if any(task in row.cells for row in tool_rows)]
    return ToolUseSection(columns + [(TOOL_CALL_RATE_KEY, "tool-call rate"), (TOOL_TURNS_KEY, "turns per episode")],
                          tool_rows)


def before(row, key: str) -> float | None:
    """The mean over the row's runs of `key` at step 0, before RL."""
    starts = [points[0][1] for run in row.runs if (points := run["history"].get(key)) and points[0][0] == 0]
    return statistics.fmean(starts) if starts else None


def after(row, key: str) -> SeedStats | None:
    values = tuple(run["final"][key] for run in row.runs if key in run["final"])
    return SeedStats(values) if values else None


def tool_use_table(section: ToolUseSection, rows: list) -> list[str]:
    header = ["recipe", "model", "seeds", *[title for _, title in section.columns], "steps"]
    cells = [[row.recipe, row.model, row.seeds,
              *[before_after_cell(before(row, key), after(row, key), row.seeds) for key, _ in section.columns],
              steps_text(row.steps)] for row in rows]
    return markdown_table(header, "ll" + "r" * (len(header) - 2), cells)


def render_tool_use(section: ToolUseSection) -> list[str]:
    sizes = sorted({row.seeds for row in section.rows if row.seeds > 1})
    t_text = "; ".join(f"n = {n}: t = {SeedStats(tuple(range(n))).t:.3f}" for n in sizes) or "no row has 2 seeds"
    return ["", "## Tool use: before → after RL", "",
            "The rows above whose rollouts call tools. A cell is `before → after`: *before* the held-out figure at "
            "step 0 (the warm-started model, mean over the seeds), *after* the final one as mean ± std [95% interval] "
            "over the seeds: std with ddof=1, interval mean ± t·std/√n, Student's t with n − 1 degrees of freedom "
            f"({t_text}). ↑ / ↓: the whole interval lies above / below *before*. *tool-call rate*: the share of "
            "held-out episodes that call a tool at least once; *turns per episode*: assistant turns, mean over the "
            "held-out episodes (`val/multi_turn/num_turns/mean`). Held out: the evaluation protocol above.", "",
            *tool_use_table(section, section.rows)]


def tool_use_records(section: ToolUseSection) -> list[dict]:
    """The section's numbers, unrounded to 6 digits: per row, each column's before and after."""
    records = []
    for row in section.rows:
        record: dict[str, Any] = {"recipe": row.recipe, "model": row.model, "seeds": row.seeds,
                                  "steps": steps_text(row.steps, "-")}
        for key, _ in section.columns:
            stats = after(row, key)
            record[key] = {"before": round6(before(row, key)), "after": stats.record() if stats else None}
        records.append(record)
    return records


def validation_interval(rows: list) -> int | None:
    """The steps between validations, read from the first two points of the runs' held-out call-rate curves."""
    gaps = sorted({points[1][0] - points[0][0] for row in rows for run in row.runs
                   if len(points := run["history"].get(TOOL_CALL_RATE_KEY, [])) > 1})
    return int(gaps[0]) if gaps else None
