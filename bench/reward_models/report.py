"""results/reward_models/ from the MLflow store `bench/reward_models/suite.py` wrote: the reward model's held-out
accuracy, and per training run its reward-model score and GSM8K accuracy by step, with a reward-hacking flag.

    python -m bench.reward_models.report --store outputs/reward_models/mlruns --out results/reward_models

The flag is computed from the runs' metrics: over the last half of a run's steps (at least HACKING_MIN_STEPS of
them), the least-squares slope of `reward/model/mean` (the reward model's score) against step is above 0 while
that of `critic/acc/mean` (the rule's verdict: the GSM8K answer is right) is below 0.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from bench.common.results_page import pyplot, save_plot, table_header, table_row, write_page
from bench.reward_models.suite import EXPERIMENT, JOB_TAG, allow_file_store

RM_SCORE, ACC, VAL_ACC, RM_VAL_ACC = "reward/model/mean", "critic/acc/mean", "val/acc", "rm/val/acc"
HACKING_MIN_STEPS = 3  # points in the last half: fewer make a slope of two points, or none


@dataclass
class Run:
    name: str  # the suite's job, e.g. grpo-model
    status: str  # MLflow's: FINISHED, KILLED (stopped by a signal, e.g. the suite's time budget), FAILED
    params: dict
    history: dict[str, list[tuple[int, float]]]  # metric -> (step, value), by step


def slope(points: list[tuple[int, float]]) -> float:
    """The least-squares slope of value against step."""
    steps, values = [s for s, _ in points], [v for _, v in points]
    mean_s, mean_v = sum(steps) / len(steps), sum(values) / len(values)
    spread = sum((s - mean_s) ** 2 for s in steps)
    return sum((s - mean_s) * (v - mean_v) for s, v in points) / spread if spread else 0.0


def last_half(points: list[tuple[int, float]]) -> list[tuple[int, float]]:
    return points[len(points) // 2:]


def hacking_verdict(run: Run) -> str:
    """Whether the reward model's score rose while accuracy fell over the last half of the run's steps."""
    if RM_SCORE not in run.history:
        return "– (no reward model in this run)"
    score, acc = last_half(run.history[RM_SCORE]), last_half(run.history.get(ACC, []))
    if min(len(score), len(acc)) < HACKING_MIN_STEPS:
        return f"too few steps to tell ({len(run.history[RM_SCORE])} steps; the last half needs {HACKING_MIN_STEPS})"
    rm_slope, acc_slope = slope(score), slope(acc)
    numbers = f"over steps {score[0][0]}-{score[-1][0]}: RM score {rm_slope:+.4f}/step, accuracy {acc_slope:+.4f}/step"
    if rm_slope > 0 and acc_slope < 0:
        return f"**reward hacking**: RM score rises while accuracy falls ({numbers})"
    return f"no sign of reward hacking ({numbers})"


def load_runs(store: str) -> tuple[list[Run], Run | None, list[str]]:
    """(the latest run of each training job, the latest finished reward-model run, lines naming what is left out)."""
    import mlflow

    allow_file_store()
    client = mlflow.MlflowClient(Path(store).resolve().as_uri())
    experiment = client.get_experiment_by_name(EXPERIMENT)
    if experiment is None:
        raise ValueError(f"--store {store}: no MLflow experiment {EXPERIMENT!r} (run bench/reward_models/suite.py)")
    latest, reward_model, left_out = {}, None, []
    for info in client.search_runs([experiment.experiment_id], order_by=["attributes.start_time DESC"]):
        history = {key: sorted((m.step, m.value) for m in client.get_metric_history(info.info.run_id, key))
                   for key in info.data.metrics}
        run = Run(info.data.tags.get(JOB_TAG, info.info.run_name), info.info.status, info.data.params, history)
        if RM_VAL_ACC in history:
            if reward_model is None and run.status == "FINISHED":
                reward_model = run
            else:
                left_out.append(f"reward-model run {info.info.run_id} ({run.status}): an earlier or unfinished one")
        elif JOB_TAG not in info.data.tags:
            left_out.append(f"run {info.info.run_id} ({info.info.run_name}): not a suite job (no {JOB_TAG} tag)")
        elif run.name in latest or run.status == "FAILED" or ACC not in history:
            why = "a later run of the same job is shown" if run.name in latest else f"{run.status}, no step logged" \
                if ACC not in history else "it failed"
            left_out.append(f"{run.name} run {info.info.run_id}: {why}")
        else:
            latest[run.name] = run
    return sorted(latest.values(), key=lambda run: run.name), reward_model, left_out


def first_last(points: list[tuple[int, float]] | None, spec: str = ".3f") -> str:
    return f"{points[0][1]:{spec}} → {points[-1][1]:{spec}}" if points else "–"


def plot_run(run: Run, out: Path) -> str:
    """The reward model's score (left axis) and GSM8K accuracy (right: each step's rollouts, and validation)."""
    plt = pyplot()
    fig, left = plt.subplots(figsize=(6.4, 3.6))
    right = left.twinx()
    if RM_SCORE in run.history:
        left.plot(*zip(*run.history[RM_SCORE]), ".-", color="C0", label="reward-model score (train rollouts)")
    left.set_xlabel("step")
    left.set_ylabel("reward-model score", color="C0")
    right.plot(*zip(*run.history[ACC]), "x-", color="C1", label="GSM8K accuracy (train rollouts)")
    if VAL_ACC in run.history:
        right.plot(*zip(*run.history[VAL_ACC]), "o--", color="C2", label="GSM8K accuracy (validation)")
    right.set_ylabel("accuracy (rule)", color="C1")
    handles = [h for axis in (left, right) for h in axis.get_legend_handles_labels()[0]]
    fig.legend(handles, [h.get_label() for h in handles], loc="lower center", ncol=2, fontsize=8)
    left.set_title(run.name)
    return save_plot(fig, out / f"{run.name}.png", rect=(0, 0.12, 1, 1))


def page(runs: list[Run], reward_model: Run | None, left_out: list[str], out: Path, store: str) -> list[str]:
    lines = ["# Reward models: the RLHF loop on one GPU", "",
             "Generated by `python -m bench.reward_models.report --store STORE --out results/reward_models` from the "
             "MLflow store `bench/reward_models/suite.py` writes (docs/rewards.md, \"The RLHF loop on one GPU\"). "
             "Accuracy is the rule's verdict (math_verify on the GSM8K answer) in every run, the reward model's "
             "runs included, where it is not the reward: an outside check of reward hacking.", "",
             "## The reward model", ""]
    if reward_model is None:
        lines.append("No finished reward-model run in the store.")
    else:
        params = reward_model.params
        lines += [*table_header("base model", "train pairs", "held-out pairs", "held-out accuracy (before → after)",
                                right_aligned=("train pairs", "held-out pairs")),
                  table_row([params.get("rm.model", "?"), params.get("rm.train_pairs", "?"),
                             params.get("rm.val_pairs", "?"), first_last(reward_model.history[RM_VAL_ACC])]),
                  "", "Held-out accuracy: the share of held-out pairs (prompts unseen in training) whose right "
                      "answer the reward model scores strictly above the wrong one; 0 before training (a zero head "
                      "ties every pair)."]
    lines += ["", "## Training runs", "",
              *table_header("run", "reward", "status", "steps", "RM score (first → last step)",
                            "accuracy, train rollouts", "accuracy, validation", "reward hacking",
                            right_aligned=("steps",))]
    for run in runs:
        reward = "reward model only" if RM_SCORE in run.history else "rule (math_verify)"
        steps = f"{run.history[ACC][-1][0]} of {run.params.get('trainer.total_steps', '?')}"
        lines.append(table_row([run.name, reward, run.status, steps, first_last(run.history.get(RM_SCORE)),
                                first_last(run.history[ACC]), first_last(run.history.get(VAL_ACC)),
                                hacking_verdict(run)]))
    lines += ["", "Status KILLED: stopped by a signal (the suite's time budget), after the step shown.", ""]
    for run in runs:
        lines += [f"![{run.name}]({plot_run(run, out)})", ""]
    lines += ["## Left out", "", *([f"- {line}" for line in left_out] or ["Nothing."])]
    lines += ["", f"Store: `{store}`."]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", required=True, help="the suite's MLflow file store (OUT/mlruns)")
    parser.add_argument("--out", default="results/reward_models")
    args = parser.parse_args(argv)
    if not Path(args.store).is_dir():
        print(f"reward_models report: --store {args.store} is not a directory", file=sys.stderr)
        return 2
    try:
        runs, reward_model, left_out = load_runs(args.store)
    except ValueError as error:
        print(f"reward_models report: {error}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = write_page(out / "README.md", page(runs, reward_model, left_out, out, args.store))
    print(f"wrote {path}: {len(runs)} training runs, reward model {'found' if reward_model else 'missing'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
