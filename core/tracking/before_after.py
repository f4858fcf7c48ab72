"""The leaderboard's before -> after section: pretrained models evaluated with `recipezoo eval` before RL
and after each recipe's training run (runs tagged eval_stage=before|after, see run_export.py).

One row per training run that an `after` eval names, one column per (data source, metric, grader),
each cell `before → after` under one protocol stated above the table. Two protocols in one column,
or one figure logged twice, raise LeaderboardError naming the runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from core.tracking.run_export import LeaderboardError

GSM8K_STRICT = "gsm8k strict `#### N`"
GSM8K_FLEXIBLE = "gsm8k flexible (last number)"
MATH_VERIFY = "math_verify on the last `\\boxed{}`"


def _number(text: Any) -> float | None:
    """A param string as a number; None for 'None'/'null'/missing (also 0 samples = all, like the loader)."""
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def _md(text: Any) -> str:
    return str(text).replace("|", "\\|")


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


@dataclass(frozen=True)
class EvalColumn:
    """One before -> after column: a data source's figure under one grader."""

    data_source: str
    metric: str   # mean@n or pass@k
    grader: str   # short: strict, flexible, math_verify, custom

    @property
    def name(self) -> str:
        return f"{self.data_source} {self.metric} ({self.grader})"

    @property
    def group(self) -> tuple[str, str]:
        return self.data_source, self.grader


@dataclass
class EvalRow:
    recipe: str
    model: str
    train_run: dict | None                 # the training run's export entry (None: not FINISHED / not exported)
    before: dict[EvalColumn, float] = field(default_factory=dict)
    after: dict[EvalColumn, float] = field(default_factory=dict)
    eval_run_ids: list[str] = field(default_factory=list)


@dataclass
class BeforeAfter:
    columns: list[EvalColumn]
    protocols: dict[tuple[str, str], str]  # (data source, grader) -> one line
    rows: list[EvalRow]


def eval_grader(data_source: str, protocol: dict) -> tuple[str, str]:
    """(short, long) name of the grader `recipezoo eval` used for `data_source` (core/reward/manager.py)."""
    from core.reward.manager import GSM8K_SOURCES, MATH_SOURCES

    custom = protocol.get("grader.custom_function")
    if custom not in (None, "", "None"):
        return "custom", f"custom function {custom}"
    if data_source in GSM8K_SOURCES:
        method = protocol.get("grader.gsm8k_method") or "strict"
        return method, GSM8K_STRICT if method == "strict" else GSM8K_FLEXIBLE
    if data_source in MATH_SOURCES:
        return "math_verify", MATH_VERIFY
    return "unregistered", f"unregistered for data_source {data_source!r}"


def _eval_columns(entry: dict) -> dict[EvalColumn, float]:
    """The figures an eval run reports, per column: mean@n, and pass@n when n > 1."""
    values = {}
    for source, figures in entry["results"].items():
        if source == "all" or not figures.get("num_prompts"):
            continue
        n = int(round(figures["num_samples"] / figures["num_prompts"]))
        grader = eval_grader(source, entry["protocol"])[0]
        for metric in (f"mean@{n}", f"pass@{n}") if n > 1 else (f"mean@{n}",):
            if metric in figures:
                values[EvalColumn(source, metric, grader)] = figures[metric]
    return values


def eval_protocol_line(entry: dict, data_source: str, with_count: bool = True) -> str:
    """How `entry` evaluated `data_source`, in one line a reader can check (without the prompt count:
    what two evals must share to sit in one column)."""
    protocol = entry["protocol"]
    max_samples = _number(protocol.get("generation.max_samples"))
    if with_count:
        prompts = int(entry["results"][data_source]["num_prompts"])
        selection = f"first {prompts} prompts" if max_samples else f"all {prompts} prompts"
    else:
        selection = f"first {max_samples:g} prompts" if max_samples else "all prompts"
    n = protocol.get("generation.n") or "?"
    temperature = _number(protocol.get("generation.temperature"))
    top_p = _number(protocol.get("generation.top_p"))
    sampling = ("temperature not logged" if temperature is None else "greedy" if temperature == 0
                else f"temperature {temperature:g}, top-p {1 if top_p is None else top_p:g}")
    top_k = _number(protocol.get("generation.top_k"))
    if top_k and temperature:
        sampling += f", top-k {top_k:g}"
    return (f"{data_source}: {selection} × {n} response{'s' if n != '1' else ''}, {sampling}, "
            f"≤ {protocol.get('generation.max_tokens')} new tokens, prompts ≤ "
            f"{protocol.get('generation.max_prompt_length')} tokens ({protocol.get('generation.rollout')} rollout); "
            f"grader {eval_grader(data_source, protocol)[1]}")


def _eval_comparable(entry: dict, data_source: str) -> str:
    return eval_protocol_line(entry, data_source, with_count=False)


def build_before_after(runs: list[dict], evals: list[dict]) -> BeforeAfter:
    """Rows: one per training run named by `after` evals; cells: the same model's `before` eval and
    that run's `after` eval. Raises when one column holds two protocols, or a value is logged twice."""
    protocols: dict[tuple[str, str], tuple[str, str, dict]] = {}  # group -> (comparable, line, first entry)
    for entry in evals:
        for column in _eval_columns(entry):
            comparable = _eval_comparable(entry, column.data_source)
            seen = protocols.setdefault(column.group, (comparable, eval_protocol_line(entry, column.data_source), entry))
            if seen[0] != comparable:
                raise LeaderboardError(
                    f"before -> after column {column.name}: eval runs {seen[2]['run_id']} and {entry['run_id']} used "
                    f"different protocols, which must not share a column:\n  {seen[0]}\n  {comparable}\n"
                    "Evaluate every model of the column alike, or delete the odd eval run (`mlflow runs delete`).")
    runs_by_id = {run["run_id"]: run for run in runs}
    rows: dict[tuple, EvalRow] = {}
    for entry in (e for e in evals if e["stage"] == "after"):
        key = (entry.get("recipe") or "?", str(entry.get("model")), entry.get("train_run_id") or entry["run_id"])
        row = rows.setdefault(key, EvalRow(key[0], key[1], runs_by_id.get(entry.get("train_run_id"))))
        _fill(row.after, entry, f"{row.recipe} × {row.model} (training run {key[2]})")
        row.eval_run_ids.append(entry["run_id"])
    befores: dict[str, dict[EvalColumn, float]] = {}
    for entry in (e for e in evals if e["stage"] == "before"):
        _fill(befores.setdefault(str(entry.get("model")), {}), entry, f"the model {entry.get('model')} before RL")
    for row in rows.values():
        row.before = befores.get(row.model, {})
        row.eval_run_ids += [e["run_id"] for e in evals if e["stage"] == "before" and str(e.get("model")) == row.model]
    columns = sorted({column for entry in evals for column in _eval_columns(entry)}, key=_column_order)
    ordered = sorted(rows.values(), key=lambda r: (r.model, r.recipe, str(_train_seed(r)), r.eval_run_ids[0]))
    groups = list(dict.fromkeys(column.group for column in columns))
    return BeforeAfter(columns, {group: protocols[group][1] for group in groups}, ordered)


def _column_order(column: EvalColumn) -> tuple:
    """GSM8K first (the training task), strict before flexible; mean@n before pass@k."""
    from core.reward.manager import GSM8K_SOURCES

    return (column.data_source not in GSM8K_SOURCES, column.data_source, column.grader != "strict", column.grader,
            not column.metric.startswith("mean"), column.metric)


def _fill(cells: dict[EvalColumn, float], entry: dict, who: str) -> None:
    for column, value in _eval_columns(entry).items():
        if column in cells:
            raise LeaderboardError(f"{who}: {column.name} is reported by more than one eval run (one is "
                                   f"{entry['run_id']}); delete the superseded one with `mlflow runs delete --run-id ID`")
        cells[column] = value


def _train_seed(row: EvalRow) -> Any:
    return row.train_run["seed"] if row.train_run else None


def _before_after_cell(row: EvalRow, column: EvalColumn) -> str:
    before, after = row.before.get(column), row.after.get(column)
    return f"{'—' if before is None else f'{before:.3f}'} → {'—' if after is None else f'{after:.3f}'}"


def render_before_after(section: BeforeAfter) -> list[str]:
    lines = [
        "",
        "## Pretrained models: before → after RL",
        "",
        "Each cell is `before → after`: the pretrained model evaluated before RL, then the policy at the end of "
        "the row's training run, under the same protocol (one run each; the seed is the training run's). "
        "Protocol per data source and grader:",
        "",
    ]
    lines += [f"- {_md(line)}" for line in section.protocols.values()]
    header = ["recipe", "model", *[column.name for column in section.columns], "seed", "steps"]
    lines += ["", "| " + " | ".join(header) + " |", "|---|---|" + "---:|" * (len(header) - 2)]
    for row in section.rows:
        run = row.train_run or {}
        cells = [row.recipe, row.model, *[_before_after_cell(row, column) for column in section.columns],
                 str(run.get("seed", "?")), str(run.get("steps", "?"))]
        lines.append("| " + " | ".join(_md(cell) for cell in cells) + " |")
    return lines


def before_after_records(section: BeforeAfter) -> dict:
    rows = []
    for row in section.rows:
        run = row.train_run or {}
        record: dict[str, Any] = {"recipe": row.recipe, "model": row.model, "seed": run.get("seed"),
                                  "steps": run.get("steps"), "train_run_id": run.get("run_id"),
                                  "eval_run_ids": " ".join(row.eval_run_ids)}
        for column in section.columns:
            record[f"{column.name}/before"] = _round(row.before.get(column))
            record[f"{column.name}/after"] = _round(row.after.get(column))
        rows.append(record)
    columns = [{"name": column.name, "data_source": column.data_source, "metric": column.metric,
                "grader": column.grader, "protocol": section.protocols[column.group]} for column in section.columns]
    return {"columns": columns, "rows": rows}
