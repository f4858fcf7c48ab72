"""Which runs of an invocation a leaderboard table leaves out, and why: the invocation page lists them and the
export prints them, so no run leaves the table in silence.

A run is left out when its job crashed, when its invocation is kept for its timings only, when its time budget
stopped it before MIN_STEPS_SHARE of its steps, and when another run of its recipe, seed and model counts instead.
"""

from __future__ import annotations

from core.leaderboard.export import STOPPED_TAG

# A run its time budget stopped before this share of trainer.total_steps measured another budget (in the first
# invocation of the reasoning-gym-open suite, engine starts shared by 4 jobs per GPU left some runs 1 step of 16): it
# never stands for its recipe in the table.
MIN_STEPS_SHARE = 0.5


def stopped_too_short(run: dict) -> bool:
    total = (run.get("params") or {}).get("trainer.total_steps")
    return (bool(run.get("tags", {}).get(STOPPED_TAG)) and total is not None
            and (run.get("steps") or 0) < MIN_STEPS_SHARE * int(total))


def left_out_runs(export: dict, invocations) -> dict[str, str]:
    """run_id -> why the table leaves that run of `export` out. Of the runs of one recipe, seed and model, the one
    that counts is a finished run over one stopped by a budget, then the most steps trained, then the latest
    started (a rerun replaces the run it repeats; runs exported without a start time are the oldest)."""
    reasons = {}
    for record in invocations:
        for job in record["jobs"]:
            if job.get("run_id") and job["status"] == "crashed":
                reasons[job["run_id"]] = crash_text(job)
            elif job.get("run_id") and not record.get("counted", True):
                reasons[job["run_id"]] = "its invocation is kept for its timings only (another budget or settings)"
    best = {}  # (recipe, seed, model) -> (rank, run_id) of the run that counts for it
    for run in export["runs"]:
        if run["run_id"] in reasons:
            continue
        if stopped_too_short(run):
            reasons[run["run_id"]] = (f"its time budget stopped it after {run.get('steps') or 0} of "
                                      f"{run['params']['trainer.total_steps']} steps, under {MIN_STEPS_SHARE:.0%} "
                                      "(it measured another budget)")
            continue
        key = (run["recipe"], run["seed"], run["model"])
        rank = (not run.get("tags", {}).get(STOPPED_TAG), run.get("steps") or 0, run.get("started") or 0)
        if key not in best or rank >= best[key][0]:
            best[key] = (rank, run["run_id"])
    for run in export["runs"]:
        winner = best.get((run["recipe"], run["seed"], run["model"]), (None, None))[1]
        if run["run_id"] not in reasons and winner != run["run_id"]:
            reasons[run["run_id"]] = f"replaced: run {winner} of its recipe, seed and model counts instead"
    return {run["run_id"]: reasons[run["run_id"]] for run in export["runs"] if run["run_id"] in reasons}


def crash_text(job: dict) -> str:
    """A crashed job in words: its cause where known, else its exit status."""
    cause = job.get("error") or (f"exit {job['exit']}" if job.get("exit") is not None else "no exit status")
    return f"its job crashed ({cause})"


def left_out_lines(export: dict, invocations, reasons: dict[str, str]) -> list[str]:
    """One markdown bullet per run left out of the table (`reasons`: left_out_runs'), and per crashed job of
    `invocations` that left no finished run at all, each with its reason."""
    lines = [f"- {run['recipe']} seed {run['seed']}, run {run['run_id']}: {reasons[run['run_id']]}"
             for run in export["runs"] if run["run_id"] in reasons]
    exported = {run["run_id"] for run in export["runs"]}
    for record in invocations:
        for job in record["jobs"]:
            if job["status"] == "crashed" and job.get("run_id") not in exported:
                lines.append(f"- {job['name']} of the invocation started {record['started']}: {crash_text(job)}, "
                             "no finished run")
    return lines
