"""Statistics over seeds and the curves plot of the leaderboard: mean, std, a Student-t 95% interval.

A leaderboard cell summarises one figure of n runs that differ only in their seed. The interval is
mean ± t · std / √n with t the two-sided 95% quantile of Student's t with n − 1 degrees of freedom
(n = 3: t = 4.303): with three seeds it is wide, and it says so.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path

# Two-sided 95% quantiles of Student's t, t_{0.975, df} for df = 1..30 (any statistics table; the test
# checks them against scipy.stats.t.ppf). More degrees of freedom than 30 use the normal 1.960.
T_975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
         2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
         2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
Z_975 = 1.960


def t_quantile_95(df: int) -> float:
    """t_{0.975, df}: the half-width of a 95% interval is this many standard errors."""
    if df < 1:
        raise ValueError(f"a t-interval needs at least 2 values (df >= 1), got df={df}")
    return T_975[df - 1] if df <= len(T_975) else Z_975


@dataclass(frozen=True)
class SeedStats:
    """One figure over seeds: its values, their mean, std (ddof=1) and 95% t-interval."""

    values: tuple[float, ...]

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.values)

    @property
    def std(self) -> float | None:
        return statistics.stdev(self.values) if self.n >= 2 else None

    @property
    def t(self) -> float | None:
        return t_quantile_95(self.n - 1) if self.n >= 2 else None

    @property
    def interval(self) -> tuple[float, float] | None:
        """(low, high) of mean ± t · std / √n; None for one seed."""
        if self.n < 2:
            return None
        half = self.t * self.std / math.sqrt(self.n)
        return self.mean - half, self.mean + half

    def text(self) -> str:
        """`0.041 ± 0.006 [0.026, 0.056]`; a single seed shows its value and `± n/a`."""
        if self.interval is None:
            return f"{self.mean:.3f} ± n/a"
        low, high = self.interval
        return f"{self.mean:.3f} ± {self.std:.3f} [{low:.3f}, {high:.3f}]"

    def record(self) -> dict:
        """The numbers of `text()`, rounded to 6 digits, for leaderboard.json."""
        interval = self.interval
        return {"mean": round(self.mean, 6), "std": None if self.std is None else round(self.std, 6),
                "ci95": None if interval is None else [round(interval[0], 6), round(interval[1], 6)],
                "n": self.n, "values": [round(value, 6) for value in self.values]}


def mean_curve(histories: list[list[list[float]]]) -> tuple[list[float], list[float], list[float]]:
    """Steps, mean and std over the seeds that logged each step (std 0 where only one did)."""
    by_step: dict[float, list[float]] = {}
    for history in histories:
        for step, value in history:
            by_step.setdefault(step, []).append(value)
    steps = sorted(by_step)
    means = [statistics.fmean(by_step[s]) for s in steps]
    stds = [statistics.stdev(by_step[s]) if len(by_step[s]) > 1 else 0.0 for s in steps]
    return steps, means, stds


WALL_CLOCK = "wall-clock"  # a panel's third item: x is each step's mean `step_clock` seconds, not the step


def plot_seed_curves(series: list[tuple[str, list[dict]]], panels: list[tuple[str, ...]], path: Path,
                     title: str = "mean over seeds, shaded ±1 std") -> Path:
    """One panel per (metric key, panel title[, WALL_CLOCK]); in each, one line per (label, runs): the mean over
    the runs' histories of that key, with a ±1 std band, against step (or, with WALL_CLOCK, against the seeds'
    mean seconds since their first step started). Written without date metadata, so the same runs give the
    same bytes."""
    from matplotlib.figure import Figure  # no pyplot: no global state, no GUI backend (Agg via savefig)
    from matplotlib.ticker import MaxNLocator

    figure = Figure(figsize=(5.5 * len(panels), 4.2), layout="constrained")
    colors = series_colors(len(series))
    for axes, (key, panel_title, *x_axis) in zip(figure.subplots(1, len(panels), squeeze=False)[0], panels):
        against_clock = x_axis == [WALL_CLOCK]
        for (label, runs), color in zip(series, colors):
            histories = [run["history"].get(key) for run in runs if run["history"].get(key)]
            if not histories:
                continue
            steps, means, stds = mean_curve(histories)
            xs = clock_seconds(runs, steps) if against_clock else steps
            axes.plot(xs, means, label=label, color=color, marker="o" if len(steps) < 20 else None, markersize=3)
            axes.fill_between(xs, [m - s for m, s in zip(means, stds)], [m + s for m, s in zip(means, stds)],
                              color=color, alpha=0.15, linewidth=0)
        axes.set_title(panel_title, fontsize=9)
        axes.set_ylabel(key)
        axes.set_xlabel("seconds since the first step's start" if against_clock else "step")
        if not against_clock:
            axes.xaxis.set_major_locator(MaxNLocator(integer=True))
        axes.grid(alpha=0.3)
        if axes.lines:
            axes.legend(fontsize=7, ncol=2 if len(axes.lines) > 8 else 1)
    figure.suptitle(title, fontsize=9)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100, format="png", metadata={"Software": None})
    return path


def clock_seconds(runs: list[dict], steps: list) -> list[float]:
    """Each step's wall-clock seconds, the mean over the runs' `step_clock` (nan where none logged it)."""
    clock_steps, clock_means, _ = mean_curve([run["step_clock"] for run in runs if run.get("step_clock")])
    seconds = dict(zip(clock_steps, clock_means))
    return [seconds.get(step, float("nan")) for step in steps]


def series_colors(count: int) -> list:
    """One colour per series, the same in every panel (a panel without some series would otherwise shift
    the default cycle); the 20 of tab20 where the 10 of the default cycle would repeat."""
    from matplotlib import colormaps

    if count <= 10:
        return [f"C{i}" for i in range(count)]
    palette = colormaps["tab20"].colors
    return [palette[i % len(palette)] for i in range(count)]
