"""The leaderboard's tool section for a pretrained model: each recipe trained with a tool and single-turn, side by side.

A tool suite (`recipezoo leaderboard run --suite tool-arithmetic`, bench/leaderboard/tool_modes.py) trains every
recipe × seed twice from one pretrained model, on the same problems and budget: with the tool (rows
`<recipe>-tool`, evaluated under the model label `<model> + python tool`) and single-turn (`<recipe>`, the model's
own label). The before → after section (before_after.py) shows each label against its own start; this section puts
the two rollouts in one table against one start, the pretrained model's accuracy WITHOUT the tool (what a tool
must beat), with what the held-out episodes did with the tool (`recipezoo eval`'s tool figures, from the
multi-turn episodes of the final evaluation) and how each tool row stands against its recipe's single-turn row.
Rows are ranked on the held-out accuracy by Holm-corrected pairwise Welch tests (ranking.py) over the runs that
trained their whole budget.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core.leaderboard.before_after import BeforeAfter, RecipeRow, before_after_cell
from core.leaderboard.eval_columns import EvalColumn
from core.leaderboard.ranking import Ranking, rank_by_significance, welch_test
from core.leaderboard.seed_stats import SeedStats
from core.leaderboard.suite_rank import full_budget, rank_text, ranking_lines
from core.leaderboard.tables import markdown_table, md_cell, round6, steps_text

TOOL_ROW_SUFFIX = "-tool"
TOOL_LABEL = " + python tool"
# (flat eval figure, as `recipezoo eval` logs it under eval/<source>/, column title)
TOOL_FIGURES = (("tool_call_rate", "tool-call rate"), ("num_turns", "turns per episode"),
                ("tool_errors", "tool errors per episode"))
STOP_PREFIX = "stop_reason_"


def tool_model_label(model: str) -> str:
    """The eval_model of the tool rollout's evaluations: another starting point than `model` alone."""
    return f"{model}{TOOL_LABEL}"


@dataclass
class ToolSuiteRow:
    row: RecipeRow
    tool: bool
    figures: list[dict]  # per run of row.runs, its final evaluation's tool figures on the section's source ({} none)

    def stats(self, key: str) -> SeedStats | None:
        values = tuple(figures[key] for figures in self.figures if key in figures)
        return SeedStats(values) if values else None


@dataclass
class ToolSuite:
    model: str                  # the pretrained model, without the tool's label
    column: EvalColumn          # the held-out accuracy the rows are compared on
    protocol: str
    start: float | None         # the pretrained model's accuracy without the tool
    tool_start: float | None    # ... and with it
    tool_start_figures: dict    # what its episodes did with the tool
    rows: list[ToolSuiteRow]    # best first
    ranking: Ranking | None


def tool_source_figures(entry: dict) -> dict[str, dict]:
    """An eval run's tool figures per data source (only the sources its episodes called tools on)."""
    return {source: figures for source, figures in entry["results"].items() if "tool_call_rate" in figures}


def build_tool_suites(section: BeforeAfter, evals: list[dict]) -> list[ToolSuite]:
    """One section per pretrained model evaluated with the tool; none when no evaluation recorded tool figures."""
    by_id = {entry["run_id"]: entry for entry in evals}
    labels = sorted({model for model in [*section.befores, *(row.model for row in section.rows)]
                     if model.endswith(TOOL_LABEL)})
    return [suite for label in labels if (suite := _build_one(section, evals, by_id, label))]


def _build_one(section: BeforeAfter, evals: list[dict], by_id: dict, label: str) -> ToolSuite | None:
    model = label[:-len(TOOL_LABEL)]
    sources = {source for entry in evals if entry.get("model") == label for source in tool_source_figures(entry)}
    column = next((c for c in section.columns if c.data_source in sources and c.metric == "mean@1"), None)
    if column is None:
        return None
    befores = [entry for entry in evals if entry["stage"] == "before" and entry.get("model") == label]
    rows = [ToolSuiteRow(row, row.model == label, [_figures(member, by_id, column.data_source) for member in row.runs])
            for row in section.rows if row.model in (model, label)]
    rows.sort(key=lambda r: (r.row.after(column) is None, -(r.row.after(column).mean if r.row.after(column) else 0),
                             r.row.recipe))
    samples = {r.row.recipe: tuple(member.after[column] for member in r.row.runs
                                   if full_budget(member) and column in member.after) for r in rows}
    return ToolSuite(model, column, section.protocols[column.group], section.befores.get(model, {}).get(column),
                     section.befores.get(label, {}).get(column),
                     next((tool_source_figures(e)[column.data_source] for e in befores), {}),
                     rows, rank_by_significance(samples) if rows else None)


def _figures(member, by_id: dict, source: str) -> dict:
    for run_id in member.eval_run_ids:
        figures = tool_source_figures(by_id.get(run_id, {"results": {}})).get(source)
        if figures:
            return figures
    return {}


def single_turn_row(suite: ToolSuite, row: ToolSuiteRow) -> ToolSuiteRow | None:
    """The single-turn row of a tool row's recipe."""
    recipe = row.row.recipe.removesuffix(TOOL_ROW_SUFFIX)
    return next((other for other in suite.rows if not other.tool and other.row.recipe == recipe), None)


def versus_single(suite: ToolSuite, row: ToolSuiteRow) -> dict | None:
    """{points: the tool row's mean accuracy minus its single-turn row's, in points; p: Welch's two-sided p, where
    both have two runs}."""
    single = single_turn_row(suite, row) if row.tool else None
    tool_stats, single_stats = row.row.after(suite.column), single and single.row.after(suite.column)
    if not tool_stats or not single_stats:
        return None
    p = (welch_test(tool_stats.values, single_stats.values).p
         if tool_stats.n > 1 and single_stats.n > 1 else None)
    return {"points": 100 * (tool_stats.mean - single_stats.mean), "p": p}


def stop_reasons(row: ToolSuiteRow) -> dict[str, float]:
    """How the held-out episodes ended: each reason's share, mean over the runs, the most common first; reasons no
    episode had left out."""
    reasons = sorted({key for figures in row.figures for key in figures if key.startswith(STOP_PREFIX)})
    means = {key[len(STOP_PREFIX):]: stats.mean for key in reasons if (stats := row.stats(key))}
    return dict(sorted(((reason, share) for reason, share in means.items() if share > 0), key=lambda item: -item[1]))


def _train_mean(row: ToolSuiteRow, read) -> float | None:
    values = [value for member in row.row.runs if (value := read(member.train_run)) is not None]
    return sum(values) / len(values) if values else None


def _gap_text(row: ToolSuiteRow) -> str:
    first = _train_mean(row, lambda run: (run.get("logprob_diff") or {}).get("first_turn_mean"))
    later = _train_mean(row, lambda run: (run.get("logprob_diff") or {}).get("later_turns_mean"))
    return "—" if first is None else f"{first:.4f} / " + ("—" if later is None else f"{later:.4f}")


def _row_cells(suite: ToolSuite, row: ToolSuiteRow) -> list:
    seeds = len(row.row.runs)
    versus = versus_single(suite, row)
    versus_text = "—" if versus is None else f"{versus['points']:+.1f} pts" + (
        "" if versus["p"] is None else f" (p = {versus['p']:.3f})")
    figures = [before_after_cell(suite.tool_start_figures.get(key), row.stats(key), seeds) if row.tool else "—"
               for key, _ in TOOL_FIGURES]
    stops = ", ".join(f"{reason} {share:.2f}" for reason, share in stop_reasons(row).items()) or "—"
    tool_s = _train_mean(row, lambda run: (run.get("stage_seconds") or {}).get("tool"))
    steps = sorted({member.train_run["steps"] for member in row.row.runs if member.train_run["steps"] is not None})
    return [row.row.recipe, "Python tool" if row.tool else "single-turn", seeds, rank_text(suite.ranking, row.row.recipe),
            before_after_cell(suite.start, row.row.after(suite.column), seeds), versus_text, *figures, stops,
            "—" if tool_s is None else f"{tool_s:.2f}", _gap_text(row), steps_text(steps)]


def render_tool_suite(suite: ToolSuite) -> list[str]:
    figures = suite.tool_start_figures
    start = "—" if suite.start is None else f"{suite.start:.3f}"
    with_tool = "—" if suite.tool_start is None else f"{suite.tool_start:.3f}"
    rate = f", its episodes calling it {figures['tool_call_rate']:.2f} of the time" if "tool_call_rate" in figures else ""
    header = ["recipe", "rollout", "seeds", "rank", f"{suite.column.name}: start → after", "vs single-turn",
              *[title for _, title in TOOL_FIGURES], "stop reasons", "tool s/step", "log-prob gap, first / later turns",
              "steps"]
    table = [_row_cells(suite, row) for row in suite.rows]
    return ["", f"## With the Python tool and single-turn, pretrained model `{suite.model}`", "",
            "Each recipe trains the pretrained model twice per seed on the same problems and budget: with the sandboxed "
            f"Python tool (rows `<recipe>{TOOL_ROW_SUFFIX}`: multi-turn episodes, the tool's replies between the "
            "turns) and single-turn (`<recipe>`). Before training the model scores "
            f"{start} without the tool and {with_tool} with it{rate}; *start* is the first, the figure a tool must "
            "beat. *after*: mean ± std [95% interval] over the seeds; ↑ / ↓: the whole interval lies above / below "
            "the start; tool figures run from the pretrained model with the tool.", "",
            f"- Held out: {md_cell(suite.protocol)}.",
            "- *vs single-turn*: the tool row's mean accuracy minus its recipe's single-turn row's, in points, with "
            "Welch's two-sided p (unadjusted) where both rows have two runs.",
            "- *tool-call rate*: the share of held-out episodes that call the tool; *turns per episode*: assistant "
            "turns; *tool errors per episode*: calls that raised, timed out or could not be parsed; *stop reasons*: "
            "how the held-out episodes ended, mean shares over the seeds (`stop`: answered after calling the tool, "
            "`no_tool_call`: answered without it, `length`: out of response tokens, `max_turns`: still calling at the "
            "last turn allowed).",
            "- *tool s/step*: the wall time of a training step's tool phases, mean over the steps; *log-prob gap*: "
            "|engine − trainer| log-prob per sampled token, mean over the steps, on the first turn and on the turns "
            "after a tool reply (whose context the trainer rebuilds).", "",
            *markdown_table(header, "ll" + "r" * (len(header) - 2), table),
            *ranking_lines(suite.ranking, [row.row for row in suite.rows], suite.column.name)]


def tool_suite_records(suite: ToolSuite) -> dict[str, Any]:
    """The section's numbers, unrounded to 6 digits."""
    rows = []
    for row in suite.rows:
        stats = row.row.after(suite.column)
        versus = versus_single(suite, row)
        rows.append({"recipe": row.row.recipe, "tool": row.tool, "seeds": len(row.row.runs),
                     "rank": (suite.ranking.ranks.get(row.row.recipe) or None) if suite.ranking else None,
                     "accuracy": stats.record() if stats else None,
                     "vs_single_turn": None if versus is None else {key: round6(value) for key, value in versus.items()},
                     **{key: (s.record() if (s := row.stats(key)) else None) for key, _ in TOOL_FIGURES},
                     "stop_reasons": {reason: round6(share) for reason, share in stop_reasons(row).items()}})
    return {"model": suite.model, "column": suite.column.name, "start": round6(suite.start),
            "tool_start": round6(suite.tool_start),
            "tool_start_figures": {key: round6(value) for key, value in sorted(suite.tool_start_figures.items())},
            "rows": rows}
