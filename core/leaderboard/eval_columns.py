"""What an evaluation run measured: its figures as before -> after columns (data source, metric, grader), the
protocol line two evaluations must share to sit in one column, and, where it measured what a training run
validates, the step 0 that run's held-out curve starts from (a run with trainer.val_before_train=false).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core.leaderboard.export import LeaderboardError
from core.reward.reasoning_gym import is_reasoning_gym

GSM8K_STRICT = "gsm8k strict `#### N`"
GSM8K_FLEXIBLE = "gsm8k flexible (last number)"
GSM8K_MATH_VERIFY = "gsm8k math_verify on the last `\\boxed{}`, else the final expression"
GSM8K_GRADERS = {"strict": GSM8K_STRICT, "flexible": GSM8K_FLEXIBLE, "math_verify": GSM8K_MATH_VERIFY}
MATH_VERIFY = "math_verify on the last `\\boxed{}`"
REASONING_GYM_VERIFIER = ("the task's own reasoning-gym verifier (`score_answer`) on the last `<answer>…</answer>`, "
                          "else on the last line (core/reward/reasoning_gym.py); correct = full score")


def param_number(text: Any) -> float | None:
    """A param string as a number; None for 'None'/'null'/missing (also 0 samples = all, like the loader)."""
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


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


def scored_sources(entry: dict) -> dict[str, dict]:
    """An eval run's figures per data source it scored (not the `all` summary)."""
    return {source: figures for source, figures in entry["results"].items()
            if source != "all" and figures.get("num_prompts")}


def eval_grader(data_source: str, protocol: dict) -> tuple[str, str]:
    """(short, long) name of the grader `recipezoo eval` used for `data_source` (core/reward/manager.py)."""
    from core.reward.manager import GSM8K_SOURCES, MATH_SOURCES

    custom = protocol.get("grader.custom_function")
    if custom not in (None, "", "None"):
        return "custom", f"custom function {custom}"
    if data_source in GSM8K_SOURCES:
        method = protocol.get("grader.gsm8k_method") or "strict"
        return method, GSM8K_GRADERS.get(method, f"gsm8k {method}")
    if data_source in MATH_SOURCES:
        return "math_verify", MATH_VERIFY
    if is_reasoning_gym(data_source):
        return "verifier", REASONING_GYM_VERIFIER
    return "unregistered", f"unregistered for data_source {data_source!r}"


def eval_columns(entry: dict) -> dict[EvalColumn, float]:
    """The figures an eval run reports, per column: mean@n, and pass@n when n > 1."""
    values = {}
    for source, figures in scored_sources(entry).items():
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
    max_samples = param_number(protocol.get("generation.max_samples"))
    if with_count:
        prompts = int(entry["results"][data_source]["num_prompts"])
        selection = f"first {prompts} prompts" if max_samples else f"all {prompts} prompts"
    else:
        selection = f"first {max_samples:g} prompts" if max_samples else "all prompts"
    n = protocol.get("generation.n") or "?"
    temperature = param_number(protocol.get("generation.temperature"))
    top_p = param_number(protocol.get("generation.top_p"))
    sampling = ("temperature not logged" if temperature is None else "greedy" if temperature == 0
                else f"temperature {temperature:g}, top-p {1 if top_p is None else top_p:g}")
    top_k = param_number(protocol.get("generation.top_k"))
    if top_k and temperature:
        sampling += f", top-k {top_k:g}"
    return (f"{data_source}: {selection} × {n} response{'s' if n != '1' else ''}, {sampling}, "
            f"≤ {protocol.get('generation.max_tokens')} new tokens, prompts ≤ "
            f"{protocol.get('generation.max_prompt_length')} tokens ({protocol.get('generation.rollout')} rollout); "
            f"grader {eval_grader(data_source, protocol)[1]}")


def column_protocols(evals: list[dict]) -> dict[tuple[str, str], str]:
    """(data source, grader) -> its protocol line; raises when two evals of one column differ."""
    seen: dict[tuple[str, str], tuple[str, str, dict]] = {}  # group -> (comparable, line, first entry)
    for entry in evals:
        for column in eval_columns(entry):
            comparable = eval_protocol_line(entry, column.data_source, with_count=False)
            first = seen.setdefault(column.group, (comparable, eval_protocol_line(entry, column.data_source), entry))
            if first[0] != comparable:
                raise LeaderboardError(
                    f"before -> after column {column.name}: eval runs {first[2]['run_id']} and {entry['run_id']} used "
                    f"different protocols, which must not share a column:\n  {first[0]}\n  {comparable}\n"
                    "Evaluate every model of the column alike, or delete the odd eval run (`mlflow runs delete`).")
    return {group: line for group, (_, line, _) in seen.items()}


def with_pretrained_start(run: dict, befores: list[dict]) -> dict:
    """`run` with a step-0 point on each held-out history that lacks one (a leaderboard job run with
    trainer.val_before_train=false), from the pretrained model's evaluation (`pretrained_starts`). A run that
    validated at step 0 keeps its own point: every committed run did."""
    starts = pretrained_starts(run, befores)
    added = {key: [[0, starts[key]], *points] for key, points in run["history"].items()
             if key in starts and points and points[0][0] != 0}
    return {**run, "history": {**run["history"], **added}} if added else run


def pretrained_starts(run: dict, befores: list[dict]) -> dict[str, float]:
    """What `run` would have validated at step 0, from the `before` evaluations of its model: val/<source>/acc is
    <source>'s mean@1 under the grader the run validates with (core/trainer/validation.py reports mean@n as
    acc). The suite mean follows from its tasks (with_suite_history); val/acc has no history to fill."""
    params = run["params"]
    grading = {"grader.gsm8k_method": params.get("reward.gsm8k_method"),
               "grader.custom_function": params.get("reward.custom_function.path")}
    starts = {}
    for entry in befores:
        if validated_alike(params, entry):
            starts |= {f"val/{column.data_source}/acc": value for column, value in eval_columns(entry).items()
                       if column.metric == "mean@1" and column.grader == eval_grader(column.data_source, grading)[0]}
    return starts


def validated_alike(params: dict, entry: dict) -> bool:
    """Whether the evaluation `entry` measured what a run of `params` validates: one greedy response to every
    prompt the run validates (none capped away by --eval-limit), under the run's new-token limit. GSM8K's
    evaluation is not: 512 new tokens to all 1,319 problems against the runs' 384 to the first 256."""
    protocol = entry["protocol"]
    prompts = sum(figures["num_prompts"] for figures in scored_sources(entry).values())
    validated = param_number(params.get("data.val_max_samples"))  # None: all
    return (protocol.get("generation.n") == "1" == params.get("rollout.val_n")
            and param_number(protocol.get("generation.temperature")) == 0
            == param_number(params.get("rollout.val_temperature"))
            and param_number(protocol.get("generation.max_tokens")) == param_number(params.get("data.max_response_length"))
            and param_number(protocol.get("generation.max_samples")) is None
            and (validated is None or validated >= prompts))
