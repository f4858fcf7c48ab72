"""The leaderboard's pretrained-model section: RL from a pretrained model, evaluated before and after.

`recipezoo eval` runs tagged eval_stage=before (the pretrained model, once) and eval_stage=after (the
policy at the end of a training run, eval_train_run=<run id>) become one row per recipe: one column per
(data source, metric, grader), each cell `before → after`, the after figure as mean ± std and a 95%
t-interval over the recipe's seeds (seed_stats.py); the runs one by one follow in a folded table.

Two protocols in one column, one figure logged twice, or one seed of a recipe counted twice raise
LeaderboardError naming the runs. Training runs that crashed (not FINISHED, so not in the export) or whose
evaluation did not finish (tag after_eval=pending) are left out, and the section lists them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from core.leaderboard.curve_flatness import flatness_lines
from core.leaderboard.eval_columns import (
    EvalColumn,
    column_protocols,
    eval_columns,
    param_number,
    scored_sources,
)
from core.leaderboard.export import (
    AFTER_EVAL_TAG,
    GPU_CHARGE_TAG,
    GPU_PROCESSES_TAG,
    LeaderboardError,
    check_unique_seeds,
)
from core.leaderboard.rank_basis import basis_samples, section_bases
from core.leaderboard.ranking import rank_by_significance
from core.leaderboard.ranks_by_step import ranks_by_step_lines
from core.leaderboard.schedules import schedule_lines, schedule_plots, schedule_records
from core.leaderboard.seed_stats import SeedStats
from core.leaderboard.suite_rank import (
    SUITE_MEAN,
    check_comparable,
    evidence_lines,
    rank_text,
    ranking_lines,
    run_suite_mean,
    suite_columns,
    suite_stats,
)
from core.leaderboard.tables import markdown_table, md_cell, round6, steps_text
from core.reward.reasoning_gym import is_reasoning_gym, task_name

# The budget every run of a section should share, stated above its table (config keys, as logged).
BUDGET_KEYS = ("trainer.total_steps", "data.train_batch_size", "rollout.n", "data.max_response_length",
               "data.max_prompt_length", "rollout.temperature", "actor.lr")


@dataclass
class EvalRow:
    """One training run: its `after` figures (and the model's `before` ones, shared by every row)."""

    recipe: str
    model: str
    train_run: dict
    after: dict[EvalColumn, float] = field(default_factory=dict)
    eval_run_ids: list[str] = field(default_factory=list)


@dataclass
class RecipeRow:
    """A recipe's runs from one pretrained model, one per seed."""

    recipe: str
    model: str
    runs: list[EvalRow]

    def after(self, column: EvalColumn) -> SeedStats | None:
        values = tuple(run.after[column] for run in self.runs if column in run.after)
        return SeedStats(values) if values else None


@dataclass
class BeforeAfter:
    columns: list[EvalColumn]
    protocols: dict[tuple[str, str], str]     # (data source, grader) -> one line
    befores: dict[str, dict[EvalColumn, float]]  # model -> the pretrained model's figures
    rows: list[RecipeRow]                     # by model, then best first on the first column
    left_out: list[str] = field(default_factory=list)  # runs not counted, and why
    test_sizes: dict[str, int] = field(default_factory=dict)  # data source -> prompts its evals scored


def build_before_after(runs: list[dict], evals: list[dict]) -> BeforeAfter:
    """One row per (recipe, model) whose training runs `after` evals name; the model's `before` evals."""
    protocols = column_protocols(evals)
    runs_by_id = {run["run_id"]: run for run in runs}
    per_run: dict[str, EvalRow] = {}
    left_out: dict[str, str] = {}
    for entry in (e for e in evals if e["stage"] == "after"):
        run_id = entry.get("train_run_id") or entry["run_id"]
        run = runs_by_id.get(run_id)
        why = ("not in the export (it crashed, was stopped before it finished, or was deleted)" if run is None
               else "its evaluation did not finish" if run.get("tags", {}).get(AFTER_EVAL_TAG) == "pending" else None)
        if why:
            left_out[run_id] = f"{entry.get('recipe') or '?'} training run {run_id}: {why}"
            continue
        row = per_run.setdefault(run_id, EvalRow(entry.get("recipe") or run["recipe"], str(entry.get("model")), run))
        _fill(row.after, entry, f"{row.recipe} × {row.model} (training run {run_id})")
        row.eval_run_ids.append(entry["run_id"])
    befores: dict[str, dict[EvalColumn, float]] = {}
    for entry in (e for e in evals if e["stage"] == "before"):
        _fill(befores.setdefault(str(entry.get("model")), {}), entry, f"the model {entry.get('model')} before RL")
    groups: dict[tuple[str, str], list[EvalRow]] = {}
    for row in per_run.values():
        groups.setdefault((row.model, row.recipe), []).append(row)
    for (model, recipe), members in groups.items():
        check_unique_seeds(recipe, model, [member.train_run for member in members])
    columns = sorted({column for entry in evals for column in eval_columns(entry)}, key=_column_order)
    rows = [RecipeRow(recipe, model, sorted(members, key=lambda r: str(r.train_run["seed"])))
            for (model, recipe), members in groups.items()]
    for model in {row.model for row in rows}:
        check_comparable(model, [row for row in rows if row.model == model],
                         [e for e in evals if e["stage"] == "before" and str(e.get("model")) == model])
    first, suite = (columns[0] if columns else None), suite_columns(columns)

    def rank(row: RecipeRow) -> tuple:  # best first: on the suite mean when there is a suite, else the first column
        stats = suite_stats(row, suite) if suite else row.after(first) if first else None
        return row.model, stats is None, -stats.mean if stats else 0.0, row.recipe

    test_sizes = {source: int(figures["num_prompts"]) for entry in evals
                  for source, figures in scored_sources(entry).items()}
    return BeforeAfter(columns, {column.group: protocols[column.group] for column in columns}, befores,
                       sorted(rows, key=rank), sorted(left_out.values()), test_sizes)


def _column_order(column: EvalColumn) -> tuple:
    """A task suite's columns first, then GSM8K, strict before flexible; then greedy sets before sampled
    ones; mean@n before pass@k."""
    from core.reward.manager import GSM8K_SOURCES

    sampled = column.metric.split("@")[-1] != "1"
    return (not is_reasoning_gym(column.data_source), column.data_source not in GSM8K_SOURCES, sampled,
            column.data_source, column.grader != "strict", column.grader, not column.metric.startswith("mean"),
            column.metric)


def _fill(cells: dict[EvalColumn, float], entry: dict, who: str) -> None:
    for column, value in eval_columns(entry).items():
        if column in cells:
            raise LeaderboardError(f"{who}: {column.name} is reported by more than one eval run (one is "
                                   f"{entry['run_id']}); delete the superseded one with `mlflow runs delete --run-id ID`")
        cells[column] = value


# ---- what a row's runs shared and cost ---------------------------------------------------------------

def training_reward(run: dict) -> str:
    """The reward a run trained on, from its params: `gsm8k strict, format 0.1[, overlong buffer 64]`."""
    params = run["params"]
    custom = params.get("reward.custom_function.path")
    if custom not in (None, "", "None"):
        return f"custom {custom}"
    if "reasoning_gym" in str(params.get("data.val_files")):  # the suite trains on the tasks it validates on
        text = "reasoning-gym verifiers"
    elif "tool_arithmetic" in str(params.get("data.val_files")):  # its data source is scored as MATH is
        text = "math_verify on the last \\boxed{}"
    else:
        text = f"gsm8k {params.get('reward.gsm8k_method') or '?'}, format {params.get('reward.format_score') or '?'}"
    if str(params.get("reward.overlong_buffer.enable")).lower() == "true":
        text += f", overlong buffer {params.get('reward.overlong_buffer.len')}"
    return text


# reward.gsm8k_method -> what its training reward pays (core/reward/build.py).
REWARD_LEGENDS = {
    "strict": "`gsm8k strict, format F`: verl's GSM8K scorer, 1 for `#### N` with the right N, F for `#### N` with a "
              "wrong N, else 0; ",
    "flexible": "`gsm8k flexible, format F`: verl's flexible GSM8K scorer, 1 when the last number is the answer, F "
                "when it is another, else 0; ",
    "math_verify": "`gsm8k math_verify, format F`: math_verify on the last `\\boxed{}` (else on the final expression), "
                   "1 when it equals the answer, F when it does not, else 0; ",
}


def reward_legends(runs: list[dict]) -> list[str]:
    """The legend of each GSM8K training reward the runs used, in REWARD_LEGENDS' order (strict when none is named)."""
    methods = {run["params"].get("reward.gsm8k_method") for run in runs}
    return [legend for method, legend in REWARD_LEGENDS.items() if method in methods] or [REWARD_LEGENDS["strict"]]


def budget_line(runs: list[dict]) -> str:
    """`key=value` for each BUDGET_KEYS param, the most common value first and the recipes that differ."""
    parts = []
    for key in BUDGET_KEYS:
        by_value: dict[str, list[str]] = {}
        for run in runs:
            by_value.setdefault(str(run["params"].get(key)), []).append(run["recipe"])
        common = Counter({value: len(recipes) for value, recipes in by_value.items()}).most_common(1)[0][0]
        others = [f"{', '.join(sorted(set(recipes)))}: {value}" for value, recipes in sorted(by_value.items())
                  if value != common]
        parts.append(f"`{key}={common}`" + (f" ({'; '.join(others)})" if others else ""))
    return ", ".join(parts)


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def row_costs(row: RecipeRow) -> dict[str, Any]:
    """Per-run means of what the row's runs did and cost, and how many were stopped by a budget."""
    runs = [member.train_run for member in row.runs]
    steps = sorted({run["steps"] for run in runs if run["steps"] is not None})
    tokens = [run["sampled_tokens"] if run.get("sampled_tokens") is not None else run["generated_tokens"]
              for run in runs]
    gpu = [float(run["tags"]["gpu_seconds"]) for run in runs if "gpu_seconds" in run.get("tags", {})]
    return {"steps": steps, "tokens": _mean(tokens), "gpu_minutes": None if not gpu else _mean(gpu) / 60,
            "step_seconds": _mean([run["step_seconds"] for run in runs if run.get("step_seconds") is not None]),
            "stopped": sum(1 for run in runs if run.get("tags", {}).get("stopped_by_budget")),
            "rewards": sorted({training_reward(run) for run in runs})}


# ---- rendering -------------------------------------------------------------------------------------------

def _training_task(rows: list[RecipeRow], suite: list[EvalColumn]) -> str:
    """`GSM8K` when the runs validated on a GSM8K source (their held-out curve), else that source; a reasoning-gym
    suite by its evaluated tasks (`suite`), which tell the suites apart."""
    from core.reward.manager import GSM8K_SOURCES

    sources = sorted({key[len("val/"):-len("/acc")] for row in rows for member in row.runs
                      for key in member.train_run["final"] if key.startswith("val/") and key.endswith("/acc")
                      and key != "val/acc"})
    if not sources:
        return "RL"
    if is_reasoning_gym(sources[0]):
        tasks = [task_name(column.data_source) for column in suite]
        return f"reasoning-gym suite of {len(tasks)} tasks ({', '.join(tasks)})" if tasks else "reasoning-gym suite"
    return "GSM8K" if sources[0] in GSM8K_SOURCES else sources[0]


def before_after_cell(before: float | None, stats: SeedStats | None, seeds: int) -> str:
    text = f"{'—' if before is None else f'{before:.3f}'} → {'—' if stats is None else stats.text()}"
    if stats is not None and stats.interval is not None and before is not None:
        low, high = stats.interval
        text += " ↑" if low > before else " ↓" if high < before else ""
    if stats is not None and stats.n < seeds:
        text += f" (n={stats.n})"
    return text


def steps_cell(costs: dict) -> str:
    """The steps the row's runs made, and how many of them a time budget stopped."""
    return steps_text(costs["steps"]) + (f" ({costs['stopped']} stopped)" if costs["stopped"] else "")


def _optional(value: float | None, fmt: str) -> str:
    return "—" if value is None else format(value, fmt)


def format_tokens(count: float) -> str:
    """812, 12.3k, 4.56M, 1.20G: three significant digits."""
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if count >= scale:
            return f"{count / scale:.3g}{suffix}"
    return f"{count:.0f}"


def _intro(rows: list[RecipeRow]) -> list[str]:
    """How to read the table, with the numbers (t, budget, sharing) taken from the runs themselves."""
    runs = [member.train_run for row in rows for member in row.runs]
    if not runs:
        return ["", "The pretrained model alone: no training run of it is evaluated yet."]
    sizes = sorted({len(row.runs) for row in rows if len(row.runs) > 1})
    t_text = "; ".join(f"n = {n}: t = {SeedStats(tuple(range(n))).t:.3f}" for n in sizes) or "no row has 2 seeds"
    lines = ["", "Each row trains the pretrained model with one recipe, once per seed, and evaluates each final "
             "policy (*after*); the pretrained model is evaluated once (*before*). A cell is `before → after`, the "
             "after figure as mean ± std [95% interval] over the seeds: std with ddof=1, interval mean ± t·std/√n, "
             f"Student's t with n − 1 degrees of freedom ({t_text}). ↑ / ↓: the whole interval lies above / below "
             "the pretrained model.", "",
             f"- Budget, the same for every run unless named: {budget_line(runs)}."]
    if runs and all(run.get("sampled_tokens") is not None for run in runs):
        lines.append("- *tokens*: response tokens sampled for training per run, those not trained on included "
                     "(ReMax's greedy baselines, the groups DAPO's dynamic sampling drops).")
    else:
        lines.append("- *tokens*: response tokens trained on per run.")
    suite = any(training_reward(run).startswith("reasoning-gym") for run in runs)
    if suite:
        lines.append("- *reward*: the training reward. `reasoning-gym verifiers`: each task's own `score_answer` on the "
                     "extracted answer (the evaluation's grader, below; a few tasks give partial credit for a near "
                     "answer); `overlong buffer L`: DAPO's length penalty over the last L tokens before the response "
                     "limit. *suite mean*: a run's mean over the reasoning-gym tasks, each weighing the same.")
    else:
        lines.append("- *reward*: the training reward. " + "".join(reward_legends(runs)) + "`overlong buffer L`: "
                     "DAPO's length penalty over the last L tokens before the response limit. The evaluation's graders "
                     "below give no format credit.")
    if not suite and any((param_number(run["params"].get("reward.format_score")) or 0) > 0 for run in runs):
        lines.append("- Why a format score: a pretrained model this small is almost never right at first, so a reward "
                     "of right answers alone is all zeros; credit for a well-formed `#### N` gives it a signal to "
                     "learn the answer format from first (published GSM8K recipes use 0.1).")
    devices = sorted({run["tags"]["device"] for run in runs if run.get("tags", {}).get("device")})
    shares = [int(run["tags"]["gpu_share"]) for run in runs if run.get("tags", {}).get("gpu_share")]
    seen = [int(run["tags"][GPU_PROCESSES_TAG]) for run in runs if run.get("tags", {}).get(GPU_PROCESSES_TAG)]
    if devices or shares:
        lines.append(f"- Hardware: {', '.join(devices) or 'GPU not logged'}; "
                     + (_sharing(max(shares)) if shares else "") + (_processes_seen(max(seen)) if seen else "")
                     + "*GPU-min*: the run's training wall time (MLflow run start to end: model and engine start, "
                       "training, validation; not the final evaluation), each moment divided by the number of "
                       f"processes on its GPU then ({_charge_basis(runs)}). *s/step*: mean `timing_s/step`"
                     + (", measured while sharing." if shares and max(shares) > 1 else "."))
    if any(run.get("tags", {}).get("stopped_by_budget") for run in runs):
        lines.append("- *steps*: a run stopped on purpose by its time budget counts in its row's figures with the "
                     "steps it made (never in a rank test); (k stopped) says how many of the row's runs were.")
    return lines


def _details(section: BeforeAfter, rows: list[RecipeRow]) -> list[str]:
    """The runs one by one, folded: the after figures of each seed and why a run stopped early."""
    header = ["recipe", "seed", "steps", *[column.name for column in section.columns], "s/step: stages", "stopped",
              "training run"]
    cells = [[row.recipe, member.train_run["seed"], member.train_run["steps"],
              *[_optional(member.after.get(column), ".3f") for column in section.columns], _stage_text(member.train_run),
              member.train_run.get("tags", {}).get("stopped_by_budget") or "", member.train_run["run_id"]]
             for row in rows for member in row.runs]
    align = "lrr" + "r" * len(section.columns) + "lll"
    return ["", "<details><summary>Every run</summary>", "", *markdown_table(header, align, cells), "", "</details>"]


def _stage_text(run: dict) -> str:
    """`9.6: gen 3.2, old_log_prob 2.3, ...`: the mean step and the stages that took it (exports without: —), then
    the engine's log-prob error against the trainer and the trainer's CUDA peak where the run logged them."""
    if run.get("step_seconds") is None:
        return "—"
    stages = ", ".join(f"{stage} {seconds:.1f}" for stage, seconds in (run.get("stage_seconds") or {}).items()
                       if seconds >= 0.05)
    steady = run.get("steady_step_seconds")
    mean = f"{run['step_seconds']:.1f}" + ("" if steady is None else f" ({steady:.1f} after step 1)")
    diff = run.get("logprob_diff")
    logprobs = f"; rollout/logprob_diff mean {diff['mean']:.3f}, max {diff['max']:.2f}" if diff else ""
    peak = f"; peak memory {run['peak_memory_gib']:.1f} GiB" if run.get("peak_memory_gib") is not None else ""
    return mean + (f": {stages}" if stages else "") + logprobs + peak


def section_ranking(rows: list[RecipeRow], columns: list[EvalColumn]):
    """The ranks of one model's rows on the section's first basis (rank_basis.py); None without one."""
    bases = section_bases(rows, columns)
    return rank_by_significance(basis_samples(rows, bases[0])) if bases else None


def basis_lines(rows: list[RecipeRow], columns: list[EvalColumn]) -> list[str]:
    """How the rows rank (the first basis), and the same tests on the others (rank_basis.py)."""
    return [line for index, basis in enumerate(section_bases(rows, columns))
            for line in ranking_lines(rank_by_significance(basis_samples(rows, basis)), rows, basis.label,
                                      ranks=index == 0)]


def curve_lines(rows: list[RecipeRow], columns: list[EvalColumn]) -> list[str]:
    """Whether the curve the rows rank on has flattened, and how the ranks read step by step."""
    bases = section_bases(rows, columns)
    if not bases or not rows:
        return []
    return (flatness_lines(rows, bases[0].curve_key, bases[0].curve_label)
            + ranks_by_step_lines(rows, bases[0].curve_key, bases[0].curve_label))


def _table(section: BeforeAfter, model: str, rows: list[RecipeRow]) -> list[str]:
    """One row per recipe; only the pretrained model's row while no run is evaluated yet."""
    before = section.befores.get(model, {})
    suite = suite_columns(section.columns)
    ranking = section_ranking(rows, section.columns)
    summary = [SUITE_MEAN, "rank"] if suite else ["rank"] if ranking else []
    header = ["recipe", "seeds", *summary, *[column.name for column in section.columns], "steps", "tokens", "GPU-min",
              "s/step", "reward"]
    table = []
    suite_before = run_suite_mean(before, suite)
    if not rows:
        cells = ["pretrained model", "—", *([before_after_cell(suite_before, None, 0)] if suite else []),
                 *(["—"] if summary else []),
                 *[before_after_cell(before.get(c), None, 0) for c in section.columns]]
        table.append(cells + ["—"] * 5)
    for row in rows:
        costs = row_costs(row)
        cells = [row.recipe, len(row.runs)]
        if suite:
            cells.append(before_after_cell(suite_before, suite_stats(row, suite), len(row.runs)))
        cells += [rank_text(ranking, row.recipe)] if summary else []
        cells += [before_after_cell(before.get(column), row.after(column), len(row.runs)) for column in section.columns]
        cells += [steps_cell(costs), "—" if costs["tokens"] is None else format_tokens(costs["tokens"]),
                  _optional(costs["gpu_minutes"], ".1f"), _optional(costs["step_seconds"], ".1f"),
                  "; ".join(costs["rewards"])]
        table.append(cells)
    return markdown_table(header, "l" + "r" * (len(header) - 2) + "l", table)


def render_before_after(section: BeforeAfter, plots: dict[str, str] | None = None) -> list[str]:
    """One section per pretrained model: how to read it, the protocol, the table, the runs, and its plot
    (`plots`: model -> the image's path)."""
    lines, schedule_figures = [], schedule_plots(section)
    for model in sorted(set(section.befores) | {row.model for row in section.rows}):
        rows = [row for row in section.rows if row.model == model]
        suite = suite_columns(section.columns)
        lines += ["", f"## {_training_task(rows, suite)}, pretrained model `{model}`"]
        lines += _intro(rows) + ["", "Protocol per data source and grader:", ""]
        lines += [f"- {md_cell(line)}" for line in section.protocols.values()]
        lines += [""] + _table(section, model, rows) + basis_lines(rows, section.columns)
        lines += evidence_lines(rows, suite, section.test_sizes) + curve_lines(rows, section.columns)
        lines += schedule_lines(rows, section.columns, schedule_figures.get(model))
        lines += _details(section, rows) if rows else []
        if rows and (plots or {}).get(model):
            lines += ["", f"![held-out accuracy and training reward vs step, mean over seeds]({plots[model]})"]
    if section.left_out:
        lines += ["", "Not counted:", ""] + [f"- {md_cell(why)}" for why in section.left_out]
    return lines


def before_after_records(section: BeforeAfter) -> dict:
    """The numbers of the section, unrounded to 6 digits: per recipe, per run, and the pretrained model."""
    columns = [{"name": column.name, "data_source": column.data_source, "metric": column.metric,
                "grader": column.grader, "protocol": section.protocols[column.group]} for column in section.columns]
    rows, runs = [], []
    suite = suite_columns(section.columns)
    rankings = {model: section_ranking([row for row in section.rows if row.model == model], section.columns)
                for model in {row.model for row in section.rows}}
    for row in section.rows:
        costs = row_costs(row)
        record: dict[str, Any] = {"recipe": row.recipe, "model": row.model, "seeds": len(row.runs),
                                  "steps": costs["steps"], "stopped": costs["stopped"], "tokens": round6(costs["tokens"]),
                                  "gpu_minutes": round6(costs["gpu_minutes"]),
                                  "step_seconds": round6(costs["step_seconds"]), "reward": costs["rewards"]}
        for column in section.columns:
            stats = row.after(column)
            record[column.name] = stats.record() if stats else None
        if suite:
            stats = suite_stats(row, suite)
            record[SUITE_MEAN] = stats.record() if stats else None
        if rankings[row.model]:
            record["rank"] = rankings[row.model].ranks.get(row.recipe) or None
        rows.append(record)
        for member in row.runs:
            runs.append({"recipe": row.recipe, "model": row.model, "seed": member.train_run["seed"],
                         "steps": member.train_run["steps"], "train_run_id": member.train_run["run_id"],
                         "eval_run_ids": " ".join(member.eval_run_ids),
                         **{column.name: round6(member.after.get(column)) for column in section.columns}})
    befores = {model: {column.name: round6(values.get(column)) for column in section.columns}
               | ({SUITE_MEAN: round6(run_suite_mean(values, suite))} if suite else {})
               for model, values in sorted(section.befores.items())}
    schedules = {model: records for model in sorted({row.model for row in section.rows})
                 if (records := schedule_records([row for row in section.rows if row.model == model], section.columns))}
    return {"columns": columns, "before": befores, "rows": rows, "runs": runs, "left_out": section.left_out,
            **({"schedules": schedules} if schedules else {})}


def _processes_seen(most: int) -> str:
    # nvidia-smi's count covers the processes the driver did not start (another invocation, a user's job).
    return (f"nvidia-smi listed up to {most} compute process{'es' if most > 1 else ''} on a run's device while it "
            "ran, anyone's. ")


def _charge_basis(runs: list[dict]) -> str:
    """Whose processes divided the runs' GPU time: runs charged before nvidia-smi's readings entered it counted
    their invocation's own jobs only."""
    charged = [run for run in runs if run.get("tags", {}).get("gpu_seconds")]
    by_smi = [run for run in charged if run["tags"].get(GPU_CHARGE_TAG) == "nvidia-smi"]
    if charged and len(by_smi) == len(charged):
        return "its invocation's jobs, or nvidia-smi's count where it listed more"
    if by_smi:
        return (f"its invocation's jobs; for the runs tagged `{GPU_CHARGE_TAG}=nvidia-smi`, nvidia-smi's count "
                "where it listed more")
    return "its invocation's jobs"


def _sharing(most: int) -> str:
    if most == 1:
        return "no other job of its invocation shared a training run's device. "
    return f"up to {most} processes (training runs and evaluations) shared one device at once. "
