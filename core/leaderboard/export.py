"""A compact export of the MLflow runs the leaderboard is built from (`results/leaderboard/gsm8k_smollm2/tiny_runs.json`).

MLflow is the system of record, but the store (`mlflow.db` plus artifacts) is large and local.
The export keeps only what the leaderboard and its plots read: per FINISHED run with a `recipe`
tag, its identity (recipe, model, seed), size (steps, wall time, generated tokens), the
evaluation-protocol params, the final `val/*` metrics and short histories. Committed next to
the table, it lets anyone regenerate the table without the store:
`recipezoo leaderboard report --from-export results/leaderboard/gsm8k_smollm2/tiny_runs.json`.

`recipezoo eval` runs tagged `eval_stage=before|after` (a model evaluated before RL, and each
trained policy after) go to the export's `evals` list, which the leaderboard's before -> after
section reads; an export without such runs has no `evals` key.
"""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path
from typing import Any

EXPORT_SCHEMA = 1
# Flattened config keys (see mlflow_tracker.flatten_config) that define a run and how it was evaluated.
# The budget and training-reward keys let a leaderboard state what every run shared (before_after.py).
EXPORTED_PARAMS = (
    "actor.lr",
    "algorithm.adv_estimator",
    "critic.value_head_init",
    "data.max_prompt_length",
    "data.max_response_length",
    "data.train_batch_size",
    "data.val_files",
    "data.val_max_samples",
    "model.path",
    "reward.custom_function.path",
    "reward.format_score",
    "reward.gsm8k_method",
    "reward.overlong_buffer.enable",
    "reward.overlong_buffer.len",
    "rollout.n",
    "rollout.temperature",
    "rollout.top_p",
    "rollout.val_n",
    "rollout.val_temperature",
    "trainer.seed",
    "trainer.total_steps",
    # How the rollouts were scheduled (core/leaderboard/schedules.py reads a row's schedule from them).
    "algorithm.rollout_correction.mode",
    "trainer.max_staleness",
    "trainer.n_gpus_per_node",
    "trainer.partial_rollout",
    "trainer.placement",
    "trainer.rollout_workers",
    "trainer.schedule",
)
# Tags of `recipezoo eval --tag ...` runs that the before -> after section groups by.
EVAL_STAGE_TAG = "eval_stage"        # before | after
EVAL_STAGES = ("before", "after")
EVAL_MODEL_TAG = "eval_model"        # the pretrained model evaluated (before) or trained from (after)
EVAL_RECIPE_TAG = "eval_recipe"      # after: the recipe that trained the policy
EVAL_TRAIN_RUN_TAG = "eval_train_run"  # after: the MLflow run id of that training run
TRAIN_REWARD_KEY = "critic/score/mean"
# Held-out figures of multi-turn runs whose curves the export keeps beside the accuracies (tool_use.py).
TOOL_CALL_RATE_KEY = "val/tool/call_rate"
TOOL_TURNS_KEY = "val/multi_turn/num_turns/mean"
# DAPO's dynamic sampling per step (recipes/dapo/trainer.py): kept, to show when its informative groups run out.
DYNAMIC_SAMPLING_KEYS = ("dapo/kept_group_ratio", "dapo/num_gen_batches")
GENERATED_TOKENS_KEY = "rollout/generated_tokens"  # response tokens of one step, logged every step
# Every response token the engine sampled for a step, including those not trained on (ReMax's greedy
# baseline, DAPO's dropped groups); logged by bench/leaderboard/job.py.
SAMPLED_TOKENS_KEY = "rollout/sampled_tokens"
STAGE_TIME_PREFIX = "timing_s/"
STEP_TIME_KEY = STAGE_TIME_PREFIX + "step"
# |rollout engine's log-prob − trainer's| per token, one mean and one max per step (engines that return log-probs).
LOGPROB_DIFF_PREFIX = "rollout/logprob_diff/"
PEAK_MEMORY_KEY = "perf/max_memory_allocated_gb"  # core/trainer/metrics.py memory_metrics
TURN_GAP_KEYS = ("first_turn_mean", "later_turns_mean")  # under LOGPROB_DIFF_PREFIX (core/trainer/metrics.py)
# Tags a benchmark driver sets on a training run (bench/leaderboard/driver.py):
STOPPED_TAG = "stopped_by_budget"   # why a run ended before trainer.total_steps, e.g. "time: after step 17 of 25"
GPU_SECONDS_TAG = "gpu_seconds"     # the GPU time the run is charged with, when runs share GPUs
GPU_SHARE_TAG = "gpu_share"         # the most processes of the run's own invocation that shared its GPU at once
GPU_PROCESSES_TAG = "gpu_processes_seen"  # the most compute processes nvidia-smi listed on its GPU, anyone's
GPU_CHARGE_TAG = "gpu_charge"       # "nvidia-smi": gpu_seconds divided by nvidia-smi's count where it was higher
DEVICE_TAG = "device"               # the GPU's name
AFTER_EVAL_TAG = "after_eval"       # pending (set before training) | done (every `after` evaluation logged)
MODEL_SHA_TAG = "model_sha256"      # the pretrained model file a run or evaluation started from (core/models/identity.py)
SFT_RUN_TAG = "sft_run"            # a run from an SFT model: the SFT run (bench/leaderboard/sft_first.py)
SFT_BASE_SHA_TAG = "sft_base_model_sha256"  # ... and the model file that SFT run started from
BENCH_TAGS = (AFTER_EVAL_TAG, DEVICE_TAG, GPU_SECONDS_TAG, GPU_SHARE_TAG, GPU_PROCESSES_TAG, GPU_CHARGE_TAG, STOPPED_TAG,
              MODEL_SHA_TAG, SFT_RUN_TAG, SFT_BASE_SHA_TAG)


class LeaderboardError(ValueError):
    """The runs cannot make a leaderboard as they are; the message says why and what to do."""


def is_task_acc_key(key: str) -> bool:
    """`val/<data_source>/acc` (data_source may hold a slash: `openai/gsm8k`), not the overall `val/acc`."""
    return key.startswith("val/") and key.endswith("/acc") and len(key) > len("val/acc")


def export_runs(tracking_uri: str, experiment: str) -> dict:
    """The compact export of every FINISHED run with a `recipe` tag in `experiment`.

    FAILED, KILLED and RUNNING runs are left out (a crashed seed must not count), and so are
    deleted runs (`mlflow runs delete --run-id ...` is how a bad run leaves the leaderboard).
    """
    import mlflow  # ~2 s; `--from-export` never needs it

    client = mlflow.MlflowClient(tracking_uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        names = sorted(e.name for e in client.search_experiments())
        raise LeaderboardError(
            f"no MLflow experiment {experiment!r} at {tracking_uri}; it has {names}. "
            "Pass --experiment NAME (the recipes' tracking.experiment) or --uri of the right store"
        )
    runs, evals, page_token = [], [], None
    while True:
        page = client.search_runs([found.experiment_id], filter_string="attributes.status = 'FINISHED'",
                                  max_results=1000, page_token=page_token)
        runs.extend(run for run in page if run.data.tags.get("recipe"))
        evals.extend(run for run in page if run.data.tags.get(EVAL_STAGE_TAG) and not run.data.tags.get("recipe"))
        page_token = page.token
        if not page_token:
            break
    exported = [_export_run(client, run) for run in runs]
    return _with_evals({"schema": EXPORT_SCHEMA, "experiment": experiment, "runs": _sorted_runs(exported)},
                       [_export_eval(run) for run in evals])


def export_stores(tracking_uris: list[str], experiment: str) -> dict:
    """One export of `experiment` over several stores (e.g. runs made on different machines)."""
    exports = [export_runs(uri, experiment) for uri in tracking_uris]
    runs = [run for export in exports for run in export["runs"]]
    evals = [entry for export in exports for entry in export.get("evals", [])]
    return _with_evals({"schema": EXPORT_SCHEMA, "experiment": experiment, "runs": _sorted_runs(runs)}, evals)


def _with_evals(export: dict, evals: list[dict]) -> dict:
    """Add the `evals` list only when there are eval runs, so an export without them is unchanged."""
    if evals:
        export["evals"] = sorted(evals, key=lambda e: (EVAL_STAGES.index(e["stage"]) if e["stage"] in EVAL_STAGES
                                                       else len(EVAL_STAGES), e["recipe"] or "", e["model"] or "",
                                                       e["run_name"] or "", e["run_id"]))
    return export


def _export_eval(run) -> dict:
    """A `recipezoo eval` run: who was evaluated (tags), how (its generation and grader params), and
    the figures per data source (`eval/<source>/mean@n`, `pass@k`, ... as MLflow stored them)."""
    info, params, tags, metrics = run.info, run.data.params, run.data.tags, run.data.metrics
    results: dict[str, dict[str, float]] = {}
    for key, value in sorted(metrics.items()):
        head, _, name = key.rpartition("/")
        if not head.startswith("eval/"):
            continue  # eval/reward_errors
        results.setdefault(head[len("eval/"):], {})[name.replace("_at_", "@")] = float(value)
    protocol = {key: value for key, value in sorted(params.items())
                if key.startswith(("generation.", "grader.")) and key not in ("generation.model", "generation.seed")}
    protocol["files"] = params.get("files")
    return {
        "run_id": info.run_id,
        "run_name": info.run_name,
        "stage": tags[EVAL_STAGE_TAG],
        "model": tags.get(EVAL_MODEL_TAG),
        "recipe": tags.get(EVAL_RECIPE_TAG),
        "train_run_id": tags.get(EVAL_TRAIN_RUN_TAG),
        **({"model_sha256": tags[MODEL_SHA_TAG]} if MODEL_SHA_TAG in tags else {}),
        "evaluated": params.get("generation.model"),
        "seed": _seed(params.get("generation.seed", tags.get("seed"))),
        "protocol": protocol,
        "results": results,
    }


def _sorted_runs(runs: list[dict]) -> list[dict]:
    return sorted(runs, key=lambda r: (r["recipe"], r["model"] or "", _seed_order(r["seed"]), r["run_id"]))


def _export_run(client, run) -> dict:
    info, params, tags, metrics = run.info, run.data.params, run.data.tags, run.data.metrics

    def last_logged(key: str) -> dict:
        """step -> the metric logged last at that step (a resumed run logs a step twice)."""
        return {int(m.step): m for m in sorted(client.get_metric_history(info.run_id, key),
                                               key=lambda m: (m.step, m.timestamp))}

    def history(key: str, logged: dict | None = None) -> list[list[float]]:
        points = last_logged(key) if logged is None else logged
        return [[step, float(points[step].value)] for step in sorted(points)]

    histories = {key: history(key) for key in sorted(metrics)
                 if is_task_acc_key(key) or key in (TOOL_CALL_RATE_KEY, TOOL_TURNS_KEY, *DYNAMIC_SAMPLING_KEYS)}
    histories[TRAIN_REWARD_KEY] = history(TRAIN_REWARD_KEY) if TRAIN_REWARD_KEY in metrics else []
    # Final values from the histories where we have them: MLflow's "latest" breaks step ties by timestamp.
    final = {key: metrics[key] for key in sorted(metrics) if key.startswith("val/")}
    final.update({key: points[-1][1] for key, points in histories.items() if key in final and points})
    tokens = history(GENERATED_TOKENS_KEY) if GENERATED_TOKENS_KEY in metrics else []
    sampled = history(SAMPLED_TOKENS_KEY) if SAMPLED_TOKENS_KEY in metrics else None
    step_logged = last_logged(STEP_TIME_KEY) if STEP_TIME_KEY in metrics else {}
    step_times = history(STEP_TIME_KEY, step_logged)
    stages = {key.removeprefix(STAGE_TIME_PREFIX): history(key) for key in sorted(metrics)
              if key.startswith(STAGE_TIME_PREFIX) and key != STEP_TIME_KEY}
    train_steps = histories[TRAIN_REWARD_KEY]
    return {
        "run_id": info.run_id,
        "run_name": info.run_name,
        "recipe": tags["recipe"],
        "model": params.get("model.path"),
        "seed": _seed(tags.get("seed", params.get("trainer.seed"))),
        "steps": train_steps[-1][0] if train_steps else _int_or_none(params.get("trainer.total_steps")),
        "started": round(info.start_time / 1000, 3),  # epoch seconds: of two runs that did the same, the later counts
        "wall_seconds": round((info.end_time - info.start_time) / 1000, 3) if info.end_time else None,
        "generated_tokens": int(round(sum(value for _, value in tokens))),
        "sampled_tokens": None if sampled is None else int(round(sum(value for _, value in sampled))),
        "step_seconds": round(sum(v for _, v in step_times) / len(step_times), 3) if step_times else None,
        # The first step also pays one-time costs (kernel compilation, CUDA graphs, allocator growth).
        "steady_step_seconds": steady_seconds([v for _, v in step_times]),
        **({"step_clock": _step_clock(step_logged)} if step_logged else {}),
        # Where a step's time goes (gen, old_log_prob, update_actor, ...): means over the steps, 0 s stages left out.
        "stage_seconds": {stage: round(sum(v for _, v in points) / len(points), 3)
                          for stage, points in stages.items() if points and any(v > 0 for _, v in points)},
        "logprob_diff": _logprob_diff(history, metrics),
        # The trainer process's CUDA peak over the run (the metric is the peak since its start; GPU runs only).
        **({"peak_memory_gib": round(max(v for _, v in history(PEAK_MEMORY_KEY)), 2)} if PEAK_MEMORY_KEY in metrics
           else {}),
        "tags": {key: tags[key] for key in BENCH_TAGS if key in tags},
        "params": {key: params.get(key) for key in EXPORTED_PARAMS},
        "final": final,
        "history": histories,
    }


def _step_clock(step_logged: dict) -> list[list[float]]:
    """[[step, seconds]] from {step: its timing_s/step metric}: from the first step's start (its metric's log time
    less its value) to the log time of each step's metric, the wall-clock a schedule took to get there (model load
    and engine start left out)."""
    first = min(step_logged)
    start = step_logged[first].timestamp / 1000 - float(step_logged[first].value)
    return [[step, round(step_logged[step].timestamp / 1000 - start, 3)] for step in sorted(step_logged)]


def _logprob_diff(history, metrics: dict) -> dict | None:
    """The engine's log-probs against the trainer's over a run: the mean of the per-step means and the largest
    per-step max; None where the rollout returned no log-probs."""
    keys = (LOGPROB_DIFF_PREFIX + "mean", LOGPROB_DIFF_PREFIX + "max")
    if not all(key in metrics for key in keys):
        return None
    means, maxes = ([value for _, value in history(key)] for key in keys)
    gap = {"mean": round(sum(means) / len(means), 4), "max": round(max(maxes), 4)}
    for name in TURN_GAP_KEYS:  # multi-turn runs: the first turn's sampled tokens, and the turns after a tool reply
        if LOGPROB_DIFF_PREFIX + name in metrics:
            values = [value for _, value in history(LOGPROB_DIFF_PREFIX + name)]
            gap[name] = round(sum(values) / len(values), 4)
    return gap


def steady_seconds(step_times: list[float]) -> float | None:
    """Median time of the steps after the first: what a step costs once warm (None before step 2)."""
    return round(statistics.median(step_times[1:]), 3) if len(step_times) > 1 else None


def _seed(value: Any) -> int | str | None:
    if value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return str(value)


def _seed_order(seed: Any) -> tuple:
    return (0, seed, "") if isinstance(seed, int) else (1, 0, str(seed))


def _int_or_none(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def check_unique_seeds(recipe: str, model: str, runs: list[dict]) -> None:
    """A seed must count once per (recipe, model): two finished runs of one seed raise, naming them."""
    by_seed: dict[Any, list[str]] = {}
    for run in runs:
        if run["seed"] is not None:
            by_seed.setdefault(run["seed"], []).append(run["run_id"])
    repeated = {seed: ids for seed, ids in by_seed.items() if len(ids) > 1}
    if repeated:
        details = "; ".join(f"seed {seed}: runs {', '.join(ids)}" for seed, ids in sorted(repeated.items(), key=str))
        raise LeaderboardError(
            f"recipe {recipe!r} × model {model!r} has several finished runs of one seed ({details}); "
            "a seed must count once: delete the superseded run(s) with `mlflow runs delete --run-id ID`"
        )


def model_slug(model: str) -> str:
    """`pypi://SmolLM2-135M-Instruct` -> `smollm2-135m-instruct`: a model's name as a file name part."""
    return re.sub(r"[^A-Za-z0-9.]+", "-", model.split("://")[-1]).strip("-").lower()


def per_model_paths(path: str, models: list[str]) -> dict[str, str]:
    """model -> its figure's path: `path` itself for a single model, else `path` with `_<model_slug>` before
    `.png`, one figure per model (rows of different models are never compared)."""
    if len(models) == 1:
        return {models[0]: path}
    return {model: path.replace(".png", f"_{model_slug(model)}.png") for model in models}


def merge_exports(exports: list[dict]) -> dict:
    """Several exports (e.g. the tiny-task baselines and a GPU run's) as one: their runs and evals
    together, the experiment named as a comma-separated list. A run two of them hold (the same MLflow run
    id: an out dir merged again after a rerun finished its other jobs) is kept once, as the first holds it."""
    if len(exports) == 1:
        return exports[0]
    experiments = dict.fromkeys(name for export in exports for name in str(export.get("experiment")).split(", "))
    runs = list(_first_by_id(run for export in exports for run in export["runs"]))
    evals = list(_first_by_id(entry for export in exports for entry in export.get("evals", [])))
    return _with_evals({"schema": EXPORT_SCHEMA, "experiment": ", ".join(experiments), "runs": _sorted_runs(runs)},
                       evals)


def _first_by_id(entries):
    seen = {}
    for entry in entries:
        seen.setdefault(entry["run_id"], entry)
    return seen.values()


def add_runs(export: dict, new: dict) -> dict:
    """`export` with `new`'s runs and evals added. A run `export` already holds (the same MLflow run id) is kept
    once, so adding a store again adds only its runs finished since."""
    return merge_exports([export, new])


def save_export(data: dict, path: str | Path) -> Path:
    """Write `data` as stable, diff-friendly JSON: sorted keys, one history point per line."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = _dump(data, 0) + "\n"
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)  # a crash mid-write must not leave the committed export half-written
    return path


def load_export(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise LeaderboardError(f"export {path} does not exist; create it with `recipezoo leaderboard report` "
                               "(reads MLflow and writes results/leaderboard/gsm8k_smollm2/tiny_runs.json)")
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or data.get("schema") != EXPORT_SCHEMA or "runs" not in data:
        raise LeaderboardError(f"{path} is not a recipezoo run export (schema {EXPORT_SCHEMA}); "
                               "regenerate it with `recipezoo leaderboard report`")
    return data


def _dump(value: Any, indent: int) -> str:
    """json.dumps(indent=2, sort_keys=True), except that a list of scalars stays on one line,
    so a 300-step history is 300 lines, not 1,200."""
    pad, inner = "  " * indent, "  " * (indent + 1)
    if isinstance(value, dict):
        if not value:
            return "{}"
        items = [f"{inner}{json.dumps(str(k))}: {_dump(value[k], indent + 1)}" for k in sorted(value)]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(value, (list, tuple)):
        if all(not isinstance(v, (dict, list, tuple)) for v in value):
            return "[" + ", ".join(json.dumps(v) for v in value) + "]"
        return "[\n" + ",\n".join(inner + _dump(v, indent + 1) for v in value) + "\n" + pad + "]"
    return json.dumps(value)  # NaN stays NaN (Python's json reads it back): a diverged run must show
