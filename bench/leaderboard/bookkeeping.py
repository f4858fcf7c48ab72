"""The bookkeeping of bench/leaderboard/driver.py: its MLflow store, the jobs already done, the GPU time of
each run, the export and leaderboard of an --out dir, and --merge of several such dirs into results/.

    recipezoo leaderboard merge DIR [DIR ...] [--results results]

writes results/leaderboard/gsm8k_smollm2/runs.json (the runs of every DIR, re-exported from DIR/mlruns), its
README.md (how each invocation ran, from DIR/invocations/) and the leaderboard beside them with its GSM8K section, as
`recipezoo leaderboard report --from-export results/leaderboard/gsm8k_smollm2/tiny_runs.json
results/leaderboard/gsm8k_smollm2/runs.json --out results/leaderboard/gsm8k_smollm2` does.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import time
from pathlib import Path

from bench.leaderboard.gpus import fair_share
from bench.leaderboard.left_out import left_out_lines, left_out_runs, stopped_too_short
from bench.leaderboard.suites import SUITES
from bench.leaderboard.table_readme import render_readme
from core.leaderboard.board import TINY_EXPORT, build_leaderboard, write_leaderboard
from core.leaderboard.export import (
    AFTER_EVAL_TAG,
    DEVICE_TAG,
    EVAL_STAGE_TAG,
    GPU_CHARGE_TAG,
    GPU_PROCESSES_TAG,
    GPU_SECONDS_TAG,
    GPU_SHARE_TAG,
    STOPPED_TAG,
    LeaderboardError,
    export_runs,
    load_export,
    merge_exports,
    save_export,
)
from core.tracking.console import format_duration
from core.tracking.mlflow_tracker import package_versions

EXPERIMENT = SUITES["gsm8k"].experiment
SUMMARY_KEYS = ("run_id", "steps", "stopped", "step_s", "steady_step_s", "setup_s", "train_s", "eval_s")


def open_store(uri: str, experiment: str) -> None:
    """Create the experiment before jobs start: two jobs creating it at once in a file store make two."""
    import mlflow

    client = mlflow.MlflowClient(uri)
    if client.get_experiment_by_name(experiment) is None:
        client.create_experiment(experiment)


def jobs_to_run(jobs: list, uri: str, experiment: str, model: str, redo_stopped: bool = False) -> list:
    """Mark the jobs the store already holds a counted result of as skipped (rerunning an invocation resumes it);
    with `redo_stopped`, a run its time budget stopped early does not count as done (its rerun replaces it)."""
    try:
        export = export_runs(uri, experiment)
    except LeaderboardError:
        return jobs
    done = {(run["recipe"], run["seed"], run["model"]) for run in export["runs"]
            if run.get("tags", {}).get(AFTER_EVAL_TAG) == "done" and not stopped_too_short(run)
            and not (redo_stopped and run.get("tags", {}).get(STOPPED_TAG))}
    evaluated = {entry["model"] for entry in export.get("evals", []) if entry["stage"] == "before"}
    for job in jobs:  # a tool suite evaluates the pretrained model twice, under two labels (tool_modes.py)
        trained = (job.row or job.variant, job.seed, job.model or model) in done  # an SFT job's model is its own
        if (job.variant is None and (job.eval_model or model) in evaluated) or trained:
            job.status = "skipped"
            print(f"skipping {job.name}: already done in {uri}", flush=True)
    return jobs


def discard_before_evals(uri: str, experiment: str, since: float) -> int:
    """Delete the pretrained model's eval runs logged since `since` (a crashed job's partial figures)."""
    import mlflow

    client = mlflow.MlflowClient(uri)
    found = client.get_experiment_by_name(experiment)
    runs = client.search_runs([found.experiment_id], filter_string=f"tags.{EVAL_STAGE_TAG} = 'before' and "
                              f"attributes.start_time >= {int(since * 1000)}") if found else []
    for run in runs:
        client.delete_run(run.info.run_id)
    return len(runs)


def tag_gpu_time(uri: str, job, same_gpu: list, device: str) -> None:
    """Charge the training run with its share of the GPU during its MLflow run (start to end)."""
    import mlflow

    client = mlflow.MlflowClient(uri)
    run_id = job.summary["run_id"]
    info = client.get_run(run_id).info
    now = time.time()
    seconds, most = fair_share(info.start_time / 1000, (info.end_time or now * 1000) / 1000,
                               [(other.started, other.ended or now) for other in same_gpu], job.gpu_process_readings)
    seconds *= len(job.gpu.split(","))  # a disaggregated job holds all its GPUs
    tags = {GPU_SECONDS_TAG: f"{seconds:.1f}", GPU_SHARE_TAG: str(most), DEVICE_TAG: device}
    if job.gpu_processes_seen:  # 0: no nvidia-smi reading (a CPU job, or none taken)
        tags[GPU_PROCESSES_TAG] = str(job.gpu_processes_seen)
    if job.gpu_process_readings:
        tags[GPU_CHARGE_TAG] = "nvidia-smi"
    for key, value in tags.items():
        client.set_tag(run_id, key, value)


def invocation_records(out: Path) -> list[dict]:
    """The records of the invocations into `out` (finish_invocation writes one each), oldest first."""
    return [json.loads(path.read_text()) for path in sorted((out / "invocations").glob("*.json"))]


def write_outputs(out: Path, uri: str, experiment: str) -> dict | None:
    """DIR/runs.json and DIR/leaderboard.md (+ the curves under plots/) from the store as it is now."""
    try:
        found, records = export_runs(uri, experiment), invocation_records(out)
    except LeaderboardError as error:
        print(f"no leaderboard yet: {error}", flush=True)
        return None
    reasons = left_out_runs(found, records)
    left_out = left_out_lines(found, records, reasons)
    if left_out:
        print("left out of the table:\n" + "\n".join(left_out), flush=True)
    export = counted_runs(found, reasons)
    if not export["runs"] and not export.get("evals"):
        print(f"no leaderboard yet: the store holds {len(found['runs'])} finished training run(s) and "
              f"{len(found.get('evals') or [])} evaluation(s) of experiment {experiment!r}, and none is left in "
              "the table" + (" (the reasons are above)" if left_out else ""), flush=True)
        return None
    try:
        save_export(export, out / "runs.json")
        written = write_leaderboard(export, out, export_path=out / "runs.json")
    except LeaderboardError as error:
        print(f"no leaderboard yet: {error}", flush=True)
        return None
    print("wrote " + ", ".join(str(path) for path in [out / "runs.json", *written]), flush=True)
    return export


def last_step(path: Path) -> str:
    """`step 12/25` from the console line the trainer prints after each step, or the job's phase."""
    with open(path, "rb") as log:
        log.seek(max(0, log.seek(0, 2) - 8192))
        tail = log.read().decode(errors="replace")
    steps = re.findall(r"^step (\d+/\d+)", tail, re.M)
    return f"step {steps[-1]}" if steps else "generating" if "generated " in tail else "starting"


def steps_made(path: Path) -> int | None:
    """How many steps a job's trainer finished, from its log's last step line (None before the first)."""
    made = re.match(r"step (\d+)/", last_step(path))
    return int(made.group(1)) if made else None


# An exception line; RunHalted is the trainer's own stop (a reward function failing on most rows, a runaway run).
ERROR_LINE = re.compile(r"^(?:\[rank\d+\]:\s*)?((?:[\w.]+\.)?\w*(?:Error|Exception|Interrupt|Halted)\b:.*)$")


def crash_reason(log: Path) -> str | None:
    """A crashed job's exception, as the last `SomeError: message` line of its log says it (ranks' prefixes off)."""
    if not log.is_file():
        return None
    found = [match.group(1).strip() for line in log.read_text(errors="replace").splitlines()
             if (match := ERROR_LINE.match(line.strip()))]
    return found[-1][:300] if found else None


def with_crash_reasons(record: dict, out: Path) -> dict:
    """`record` with each crashed job's `error` read from its log under `out`, where the record lacks one."""
    for job in record["jobs"]:
        crashed = job["status"] == "crashed" and not job.get("error") and job.get("log")
        if crashed and (reason := crash_reason(out / job["log"])):
            job["error"] = reason
    return record


def time_needed_s(seconds: float, eval_s: float | None, reserve_s: float) -> float:
    """What a job like one that took `seconds`, `eval_s` of them evaluating, needs left before the deadline to
    train every step: the job stops training --reserve-s before the deadline, however soon its evaluation ends,
    so the job needs its time up to the evaluation plus the reserve (its whole time where the evaluation took longer).
    A GSPO job of 361 s with a 69 s evaluation needs 532 s under --reserve-s 240, not 361."""
    return seconds if not eval_s else max(seconds, seconds - eval_s + reserve_s)


def full_job_seconds(job: dict, steps: int) -> float | None:
    """A finished job's seconds; a job its time budget stopped after k of `steps` steps, its seconds with its
    training stretched to every step (train_s · steps / k); None for any other job."""
    made, seconds = job.get("steps"), job.get("seconds")
    if not seconds or not made:
        return None
    if job["status"] == "done" and made == steps:
        return seconds
    if job["status"] == "stopped" and made < steps and job.get("train_s"):
        return seconds + job["train_s"] * (steps - made) / made
    return None


def earlier_job_seconds(outs: list[Path], steps: int, runs_per_gpu: int, device_names: set[str],
                        reserve_s: float = 0.0) -> dict[str, float]:
    """Per recipe, the most time a training job of an earlier invocation in any of `outs` with as many jobs per
    GPU on the same kind of GPUs needed before the deadline to train all its `steps` (time_needed_s under
    `reserve_s`; full_job_seconds for a stopped one): what a job of that recipe will need again."""
    longest: dict[str, float] = {}
    for record in (record for out in outs for record in invocation_records(out)):
        if record.get("runs_per_gpu") != runs_per_gpu or set(record.get("devices", {}).values()) != device_names:
            continue
        for job in record["jobs"]:
            if job.get("recipe") and (seconds := full_job_seconds(job, steps)) is not None:
                needed = time_needed_s(seconds, job.get("eval_s"), reserve_s)
                longest[job["recipe"]] = max(longest.get(job["recipe"], 0.0), needed)
    return longest


class JobTimes:
    """How much time a queued job needs left before the deadline (time_needed_s): at least `floor_s`; the most
    a job of its recipe needed, here (`finished`) or in earlier invocations (`earlier`, earlier_job_seconds);
    while neither knows its recipe, the most any recipe's job needed here."""

    def __init__(self, floor_s: float, reserve_s: float, earlier: dict[str, float]):
        self.floor_s, self.reserve_s, self.earlier = floor_s, reserve_s, earlier
        self.took: dict[str, float] = {}  # recipe -> the most a finished job of it here needed

    def finished(self, recipe: str, seconds: float, eval_s: float | None) -> None:
        needed = time_needed_s(seconds, eval_s, self.reserve_s)
        self.took[recipe] = max(self.took.get(recipe, 0.0), needed)

    def known(self, recipe: str) -> bool:
        return recipe in self.took or recipe in self.earlier

    def needs(self, recipe: str) -> float:
        own = self.took.get(recipe, 0.0) if self.known(recipe) else max(self.took.values(), default=0.0)
        return max(self.floor_s, own, self.earlier.get(recipe, 0.0))


def finish_invocation(out: Path, uri: str, experiment: str, jobs: list, record: dict) -> int:
    """Export, leaderboard, this invocation's record; one line per job status. Exit 1 if a job crashed."""
    record["wall_s"] = round(time.time() - record["started_unix"], 1)
    record["versions"] = package_versions()
    source = Path(record["model_path"]) / "recipezoo_source.json"
    record["model_source"] = json.loads(source.read_text()) if source.is_file() else None
    record["jobs"] = [{"name": job.name, "recipe": job.variant, "seed": job.seed, "gpu": job.gpu, "status": job.status,
                       "exit": job.process.returncode if job.process else None,
                       "seconds": round(job.ended - job.started, 1) if job.ended else None,
                       "log": str(job.log.relative_to(out)) if job.log else None,
                       **{key: job.summary.get(key) for key in SUMMARY_KEYS},
                       **({"error": job.error} if job.error else {})} for job in jobs]
    with_crash_reasons(record, out)
    # The out dir's name too: two invocations started in the same second (one per GPU) keep a record each.
    started = time.strftime('%Y%m%d-%H%M%S', time.localtime(record['started_unix']))
    path = out / "invocations" / f"{started}-{out.name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2, default=str) + "\n")
    write_outputs(out, uri, experiment)
    by_status: dict[str, list[str]] = {}
    for job in jobs:
        by_status.setdefault(job.status, []).append(job.name)
    for status, names in sorted(by_status.items()):
        print(f"{status}: {len(names)} ({' '.join(names)})", flush=True)
    if "not started" in by_status:
        print("the jobs not started: run the same command again (done jobs are skipped)", flush=True)
    print(f"done in {format_duration(record['wall_s'])}; record: {path}", flush=True)
    return 1 if "crashed" in by_status else 0


def merge_outputs(folders: list[Path], results: Path, timing_only: list[Path] = (), suite=None,
                  before_from: Path | None = None, table: str | None = None) -> int:
    """Several --out dirs -> results/<suite dir>/{runs.json,README.md,invocations/} and its leaderboard.* beside
    them: of its own, or, for GSM8K, with the tiny tasks' TINY_EXPORT there as further sections (suites.py).

    The runs of `timing_only` dirs (another budget: a measurement of how jobs share a GPU, say) stay out of
    the table; their invocations are listed, marked as not counted, for their timings, and each dir's export
    (`runs.json`: steps, stage times) is kept as `timings/<dir name>.json`. `before_from`: another export whose
    pretrained-model evaluation the table takes as its *before* (a longer budget's runs from the same model file:
    the table refuses one of another file, as it refuses rows from different starting points). `table`: a folder
    under `results` that holds a table of its own instead of the suite's (the GSM8K suite from another model).
    """
    suite = suite or SUITES["gsm8k"]
    if table:
        suite = dataclasses.replace(suite, results_dir=table, own_leaderboard=True, board_dir=None, board_exports=())
    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
    records = merged_invocation_records(folders, timing_only)
    exports = [export_runs((folder / "mlruns").resolve().as_uri(), suite.experiment) if (folder / "mlruns").is_dir()
               else load_export(folder / "runs.json") for folder in folders]
    found = merge_exports(exports)
    reasons = left_out_runs(found, records.values())
    merged = counted_runs(found, reasons)
    before = pretrained_evaluations(before_from) if before_from else []
    # --before-from's entries first: a table folder merged again holds the same runs, maybe without `taken_from`
    merged = merge_exports([{**merged, "runs": [], "evals": before}, merged]) if before else merged
    target = results / suite.results_dir
    board_dir = results / suite.board_dir if suite.board_dir else target  # tool-arithmetic: results/tool_use's table
    tiny = target / TINY_EXPORT  # the GSM8K section shares its table with the tiny tasks' runs
    others = [] if suite.own_leaderboard or not tiny.is_file() else [tiny]
    others += [results / path for path in suite.board_exports if (results / path).is_file()]
    try:  # the table first: runs it refuses (a seed twice, two evaluations of one model) change no file
        build_leaderboard(merge_exports([*map(load_export, others), merged]))
    except LeaderboardError as error:
        print(f"recipezoo leaderboard: {error}", flush=True)
        return 1
    write_table_records(target, merged, records, timing_only)
    invocations = [records[name] for name in sorted(records)]
    counted_ids = {run["run_id"] for run in merged["runs"]}
    sources = [*others, target / "runs.json"]
    shown = " ".join(_relative(path) for path in sources)
    regenerate = f"recipezoo leaderboard report --from-export {shown} --out {_relative(board_dir)}"
    before_note = taken_before_note(merged["evals"])
    left_out = left_out_lines(found, invocations, reasons)
    if left_out:
        print("left out of the table:\n" + "\n".join(left_out), flush=True)
    board = ("`leaderboard.md` here" if board_dir == target
             else f"the sections of `{_relative(board_dir / 'leaderboard.md')}`")
    (target / "README.md").write_text(render_readme(invocations, counted_ids, regenerate, suite, before_note,
                                                    left_out, reasons, board), encoding="utf-8")
    written = write_leaderboard(merge_exports([load_export(path) for path in sources]), board_dir, export_path=shown)
    print("wrote " + ", ".join(str(path) for path in [target / "runs.json", target / "README.md", *written]), flush=True)
    return 0


def merged_invocation_records(folders: list[Path], timing_only: list[Path]) -> dict[str, dict]:
    """file name -> the invocation record of every --out dir, `counted` False for the timing-only dirs' ones."""
    records = {}
    for folder in [*folders, *timing_only]:
        for path in sorted((folder / "invocations").glob("*.json")):
            record = with_crash_reasons(json.loads(path.read_text()), folder)  # older records: from their logs
            record["counted"] = record.get("counted", True) and folder not in timing_only
            name = path.name
            if name in records and records[name]["command"] != record["command"]:  # older names: the second only
                name = f"{path.stem}-{folder.name}{path.suffix}"
            records[name] = record
    return records


def write_table_records(target: Path, merged: dict, records: dict[str, dict], timing_only: list[Path]) -> None:
    """The table's runs.json and invocations/, and the timing-only dirs' exports under timings/."""
    save_export(merged, target / "runs.json")
    (target / "invocations").mkdir(parents=True, exist_ok=True)
    for name, record in records.items():
        (target / "invocations" / name).write_text(json.dumps(record, indent=2) + "\n")
    for folder in timing_only:  # their runs' stage times, which the invocation records do not hold
        if (folder / "runs.json").is_file():
            (target / "timings").mkdir(exist_ok=True)
            shutil.copyfile(folder / "runs.json", target / "timings" / f"{folder.name}.json")


def pretrained_evaluations(export_path: Path) -> list[dict]:
    """The pretrained model's evaluations (stage `before`) in a committed export, for --before-from, each marked
    `taken_from` that export: a later merge of the table (its folder given as an --out dir) still names it."""
    found = [entry for entry in load_export(export_path)["evals"] if entry["stage"] == "before"]
    if not found:
        raise SystemExit(f"--before-from {export_path}: no pretrained-model evaluation (stage before) in it; "
                         "expected the runs.json of a table made with --eval-before")
    return [{**entry, "taken_from": entry.get("taken_from") or _relative(export_path)} for entry in found]


def taken_before_note(evals: list[dict]) -> str | None:
    """Where the table's pretrained-model evaluations came from, when --before-from brought them (now or when an
    earlier merge wrote the table's runs.json), for its README; None when its own invocations made them."""
    taken = [entry for entry in evals if entry["stage"] == "before" and entry.get("taken_from")]
    sources = sorted({entry["taken_from"] for entry in taken})
    if not sources:
        return None
    runs = ", ".join(sorted(entry["run_name"] for entry in taken))
    return f"{', '.join(f'`{source}`' for source in sources)} (runs {runs})"


def counted_runs(export: dict, reasons: dict[str, str]) -> dict:
    """`export` without the runs that must not count (`reasons`: left_out_runs' run_id -> why), and their
    evaluations."""
    dropped = set(reasons)
    kept = dict(export, runs=[run for run in export["runs"] if run["run_id"] not in dropped])
    if "evals" in export:
        kept["evals"] = [entry for entry in export["evals"] if entry.get("train_run_id") not in dropped]
    return kept


def _relative(path: Path) -> str:
    try:
        return path.resolve().relative_to(Path.cwd()).as_posix()
    except ValueError:
        return str(path)


def summary_line(summary: dict) -> str:
    """A finished job's steps, speed, phases and headline figures, as the driver prints them."""
    parts = []
    if summary.get("steps") is not None:
        parts.append(f"{summary['steps']} steps" + (f" ({summary['stopped']})" if summary.get("stopped") else ""))
    if summary.get("step_s"):
        parts.append(f"{summary['step_s']:.1f} s/step" + (f" ({summary['steady_step_s']:.1f} after step 1)"
                                                           if summary.get("steady_step_s") else ""))
    parts += [f"{key[:-2]} {summary[key]:.0f}s" for key in ("setup_s", "train_s", "eval_s") if key in summary]
    for name, results in sorted((summary.get("figures") or {}).items()):  # name: <eval set>/<grader>
        for source, values in results.items():
            metric = next((key for key in sorted(values) if key.startswith("mean@")), None)
            if source != "all" and metric:
                parts.append(f"{name} {metric} {values[metric]:.3f}")
    return ", ".join(parts)
