"""Schedules at equal cost (issue 38): off-policy rows of the before → after section against their sync row.

The GSM8K leaderboard driver's `--schedule` names its rows `<recipe>-<schedule>[-s<K>][-partial][-disagg<R>+<T>]
[-<correction>]` (RunSchedule.suffix); a sync row without correction keeps the plain recipe name, so the sync row
of a schedule comparison is the recipe's ordinary row and every existing table reads as before. The schedule is read
back from the runs' params (trainer.schedule, algorithm.rollout_correction.mode, ...), never from the name.

When one model's rows hold several schedules, the section gets a table of them: each row's wall-clock seconds to
finish its steps and seconds a step (mean ± std over seeds), the speed-up of its seconds a step against its sync
row's (a run its time budget stopped made fewer steps than the others), and whether its accuracy
(the suite mean, else the first column) lies within the sync row's 95% t-interval; one line per row states the
claim "same accuracy at ≥ CLAIMED_SPEEDUP× less wall-clock than sync" as held or not; and a figure plots training
reward against step and against wall-clock seconds.

Wall-clock: `step_clock` of the run export, the seconds from the first step's start (its metrics' log time less its
`timing_s/step`) to each step's log time. Model load and engine start are left out (every schedule pays them
alike); validations between steps and waits for the rollout thread are in.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from core.leaderboard.export import TRAIN_REWARD_KEY, LeaderboardError, per_model_paths
from core.leaderboard.seed_stats import WALL_CLOCK, SeedStats, plot_seed_curves
from core.leaderboard.suite_rank import SUITE_MEAN, suite_columns, suite_stats
from core.leaderboard.tables import markdown_table

SYNC, NO_CORRECTION, COLOCATED = "sync", "none", "colocated"
CLAIMED_SPEEDUP = 1.6  # issue 38: "same accuracy within the seeds' 95% interval, at ≥ 1.6× less wall-clock than sync"
SCHEDULE_PLOT = "plots/schedules.png"  # under the leaderboard's out dir, beside the curves


@dataclass(frozen=True)
class RunSchedule:
    """How a run's rollouts were scheduled: what its row name adds to the recipe's."""

    schedule: str = SYNC
    correction: str = NO_CORRECTION    # algorithm.rollout_correction.mode
    max_staleness: int | None = None   # async's bound, when set
    partial_rollout: bool = False
    rollout_gpus: int = 0              # disaggregated: rollout workers (one GPU each); 0: colocated
    training_gpus: int = 1             # disaggregated: training ranks

    @property
    def gpus(self) -> int:
        return self.rollout_gpus + self.training_gpus if self.rollout_gpus else 1

    def suffix(self) -> str:
        parts = [] if self.schedule == SYNC else [self.schedule]
        parts += [f"s{self.max_staleness}"] if self.max_staleness is not None else []
        parts += ["partial"] if self.partial_rollout else []
        parts += [f"disagg{self.rollout_gpus}+{self.training_gpus}"] if self.rollout_gpus else []
        parts += [] if self.correction == NO_CORRECTION else [self.correction]
        return "".join(f"-{part}" for part in parts)

    def label(self) -> str:
        """`one_step_off, tis`: the schedule as the table names it."""
        return self.schedule + self.suffix().removeprefix(f"-{self.schedule}").replace("-", ", ")

    @classmethod
    def from_params(cls, params: dict) -> RunSchedule:
        """A run's schedule from its exported params (runs exported before these params were: sync)."""
        def text(key: str, default: str) -> str:
            value = params.get(key)
            return default if value in (None, "", "None") else str(value)

        disaggregated = text("trainer.placement", COLOCATED) == "disaggregated"
        staleness = text("trainer.max_staleness", "")
        return cls(text("trainer.schedule", SYNC), text("algorithm.rollout_correction.mode", NO_CORRECTION),
                   int(staleness) if staleness else None, text("trainer.partial_rollout", "false").lower() == "true",
                   int(text("trainer.rollout_workers", "1")) if disaggregated else 0,
                   int(text("trainer.n_gpus_per_node", "1")) if disaggregated else 1)


@dataclass
class ScheduleRow:
    """One row of the section, with what the schedule table says of it."""

    recipe: str                      # the row's name
    base: str                        # the recipe's name without the schedule's suffix: its sync row's
    schedule: RunSchedule
    accuracy: SeedStats | None       # the suite mean, else the section's first column, over seeds
    wall: SeedStats | None           # seconds to finish the steps, over seeds
    step_wall: SeedStats | None      # those seconds over the steps made, over seeds
    sync: ScheduleRow | None = None  # the same recipe's sync row, when the section has one

    @property
    def speedup(self) -> float | None:
        """The sync row's mean GPU-seconds a step (wall-clock over the steps made × the GPUs a job holds) over this
        row's: > 1 is faster. Where both hold one GPU and made the same steps it is the wall-clock ratio; a run its
        time budget stopped counts by the steps it made; a disaggregated row gets no credit for its extra GPUs."""
        if self.sync is None or self.step_wall is None or self.sync.step_wall is None or self.step_wall.mean <= 0:
            return None
        return (self.sync.step_wall.mean * self.sync.schedule.gpus) / (self.step_wall.mean * self.schedule.gpus)

    @property
    def within_sync_interval(self) -> bool | None:
        """Whether this row's mean accuracy lies within the sync row's 95% interval (None: cannot tell)."""
        interval = self.sync.accuracy.interval if self.sync and self.sync.accuracy else None
        if interval is None or self.accuracy is None:
            return None
        return interval[0] <= self.accuracy.mean <= interval[1]

    @property
    def claim_holds(self) -> bool | None:
        """Same accuracy (within sync's interval) at >= CLAIMED_SPEEDUP× sync's speed (None: cannot tell)."""
        if self.speedup is None or self.within_sync_interval is None:
            return None
        return self.within_sync_interval and self.speedup >= CLAIMED_SPEEDUP


def run_wall_seconds(run: dict) -> float | None:
    """Seconds from the run's first step's start to its last step's log (None: exported without step_clock)."""
    clock = run.get("step_clock")
    return clock[-1][1] if clock else None


def run_step_seconds(run: dict) -> float | None:
    """run_wall_seconds over the steps the run made (None: exported without step_clock)."""
    clock = run.get("step_clock")
    return clock[-1][1] / clock[-1][0] if clock else None


def schedule_rows(rows: list, columns: list) -> list[ScheduleRow]:
    """One model's rows (before_after.RecipeRow) as ScheduleRows, when they hold more than one schedule; else []."""
    suite = suite_columns(columns)
    found = []
    for row in rows:
        runs = [member.train_run for member in row.runs]
        schedules = {RunSchedule.from_params(run["params"]) for run in runs}
        if len(schedules) != 1:
            raise LeaderboardError(f"row {row.recipe}: its runs were scheduled differently ({sorted(map(str, schedules))}); "
                             "a row is one schedule: name rows by the driver's --schedule")
        schedule = schedules.pop()
        suffix = schedule.suffix()
        base = row.recipe[:-len(suffix)] if suffix and row.recipe.endswith(suffix) else row.recipe
        accuracy = suite_stats(row, suite) if suite else row.after(columns[0]) if columns else None
        walls = tuple(wall for run in runs if (wall := run_wall_seconds(run)) is not None)
        steps = tuple(seconds for run in runs if (seconds := run_step_seconds(run)) is not None)
        found.append(ScheduleRow(row.recipe, base, schedule, accuracy, SeedStats(walls) if walls else None,
                                 SeedStats(steps) if steps else None))
    if len({row.schedule for row in found}) < 2:
        return []
    syncs = {row.base: row for row in found if row.schedule == RunSchedule()}
    for row in found:
        row.sync = syncs.get(row.base) if row.schedule != RunSchedule() else None
    return sorted(found, key=lambda row: (row.base, row.schedule != RunSchedule(), row.recipe))


def _wall_text(stats: SeedStats | None, digits: int = 0) -> str:
    if stats is None:
        return "—"
    return f"{stats.mean:.{digits}f}" + ("" if stats.std is None else f" ± {stats.std:.{digits}f}")


def claim_line(row: ScheduleRow, measure: str) -> str:
    """Whether `row` holds the claim against its sync row, with the numbers that decide it."""
    if row.sync is None:
        return f"- {row.recipe}: no sync row of {row.base} in this table to compare with."
    if row.claim_holds is None:
        missing = "wall-clock (runs exported without step_clock)" if row.speedup is None else "a 95% interval (< 2 seeds)"
        return f"- {row.recipe} against {row.base}: cannot tell, no {missing}."
    low, high = row.sync.accuracy.interval
    same = "within" if row.within_sync_interval else "outside"
    return (f"- {row.recipe} against {row.base}: {measure} {row.accuracy.mean:.3f}, {same} {row.base}'s 95% interval "
            f"[{low:.3f}, {high:.3f}]; {row.speedup:.2f}× the speed ({_wall_text(row.step_wall, 2)} s a step{_on(row)} "
            f"against {_wall_text(row.sync.step_wall, 2)} s{_on(row.sync)}): the claim (same accuracy, "
            f"≥ {CLAIMED_SPEEDUP}× less wall-clock per GPU) {'holds' if row.claim_holds else 'does not hold'}.")


def _on(row: ScheduleRow) -> str:
    """` on 2 GPUs` for a row whose jobs hold several, else nothing."""
    return f" on {row.schedule.gpus} GPUs" if row.schedule.gpus > 1 else ""


def schedule_lines(rows: list, columns: list, plot: str | None = None) -> list[str]:
    """The schedule table of one model's rows, the claim per off-policy row, and the figure; [] for one schedule."""
    found = schedule_rows(rows, columns)
    if not found:
        return []
    measure = SUITE_MEAN if suite_columns(columns) else columns[0].name if columns else "accuracy"
    lines = ["", "### Schedules at equal cost", "",
             "Every row draws the same prompts and samples per step for the same steps (fewer where a time budget "
             f"stopped a run: the section's *steps* column). *{measure}*: after training, "
             "mean ± std [95% t-interval] over seeds. *wall-clock s*: from the first step's start to the last step's "
             "end (model load and engine start left out; validations in), mean ± std over seeds; *s/step*: that over "
             "the steps made. *GPUs*: a job's. *speed-up*: the sync row's mean GPU-seconds a step (s/step × GPUs) "
             "over this row's: the wall-clock ratio where both rows hold one GPU and made the same steps. *within "
             "sync's 95%*: this row's mean inside the sync row's interval.", ""]
    table = []
    for row in found:
        within = "—" if row.within_sync_interval is None else "yes" if row.within_sync_interval else "no"
        cells = [row.recipe, row.schedule.label(), len(row.accuracy.values) if row.accuracy else 0,
                 row.accuracy.text() if row.accuracy else "—", within if row.sync else "(sync)", row.schedule.gpus,
                 _wall_text(row.wall), _wall_text(row.step_wall, 2),
                 "—" if row.speedup is None else f"{row.speedup:.2f}×"]
        table.append(cells)
    header = ["recipe", "schedule", "seeds", measure, "within sync's 95%", "GPUs", "wall-clock s", "s/step", "speed-up"]
    lines += markdown_table(header, "llrrlrrrr", table)
    lines += [""] + [claim_line(row, measure) for row in found if row.schedule != RunSchedule()]
    if plot:
        lines += ["", f"![training reward vs step and vs wall-clock seconds, mean over seeds]({plot})"]
    return lines


def schedule_records(rows: list, columns: list) -> list[dict]:
    """The schedule table's numbers for leaderboard.json ([] for one schedule)."""
    return [{"recipe": row.recipe, "base": row.base, "schedule": row.schedule.label(),
             "accuracy": row.accuracy.record() if row.accuracy else None,
             "wall_seconds": row.wall.record() if row.wall else None,
             "step_seconds": row.step_wall.record() if row.step_wall else None,
             "speedup": None if row.speedup is None else round(row.speedup, 6),
             "within_sync_interval": row.within_sync_interval, "claim_holds": row.claim_holds}
            for row in schedule_rows(rows, columns)]


def schedule_plots(section) -> dict[str, str]:
    """model -> the schedule figure's path under the out dir, for each model whose rows hold several schedules."""
    models = sorted({row.model for row in section.rows})
    several = [model for model in models if schedule_rows([r for r in section.rows if r.model == model],
                                                          section.columns)]
    paths = per_model_paths(SCHEDULE_PLOT, models)
    return {model: paths[model] for model in several}


def write_schedule_plots(section, out: Path) -> list[Path]:
    """The figures schedule_plots names, written under `out` (none when no model has several schedules)."""
    if section is None:
        return []
    return [plot_schedule_curves([row for row in section.rows if row.model == model], out / path, model)
            for model, path in schedule_plots(section).items()]


def plot_schedule_curves(rows: list, path: Path, model: str) -> Path:
    """Training reward against step and against wall-clock seconds, one line per row: the mean over its seeds
    (at each step, x the seeds' mean seconds), shaded ±1 std."""
    series = [(f"{row.recipe} (n={len(row.runs)})", [member.train_run for member in row.runs]) for row in rows]
    panels = [(TRAIN_REWARD_KEY, "training reward vs step"),
              (TRAIN_REWARD_KEY, "training reward vs wall-clock", WALL_CLOCK)]
    return plot_seed_curves(series, panels, path, title=f"{model}: schedules, mean over seeds, shaded ±1 std")
