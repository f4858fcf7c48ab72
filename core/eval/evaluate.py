"""`recipezoo eval`: score generated responses and report mean@n / pass@k per data source.

Scoring goes through the reward manager the trainer uses (same scorers, same dispatch by
`data_source`, same timeouts), and the figures through `core.eval.summary.summarize`, which
validation during training uses too. Responses of tool-using episodes (rows with `episodes`, from a multi-turn
rollout) add their tool figures per data source (`tool_use`: tool-call rate, turns, tool errors, stop reasons),
the ones validation logs as `val/tool/*` and `val/multi_turn/*`.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from core.data.rows import get_field, read_rows
from core.eval.summary import PromptResult, summarize
from core.reward.answer_formats import format_shares
from core.reward.manager import too_many_errors
from core.rollout.multi_turn.episode_metrics import multi_turn_metrics

GROUND_TRUTH_KEY = "reward_model.ground_truth"


def load_scored_inputs(paths: list[str]) -> list[dict]:
    """Rows of `recipezoo generate` output, checked for what scoring needs."""
    rows = []
    for path in paths:
        file_rows = read_rows(path)
        for number, row in enumerate(file_rows):
            for key in ("data_source", GROUND_TRUTH_KEY, "responses"):
                if get_field(row, key, None) is None:
                    raise ValueError(f"{path}: row {number} has no {key!r} (it has {sorted(row)}); eval reads the "
                                     "output of `recipezoo generate`, whose input rows follow verl's schema "
                                     "(`recipezoo data` writes them)")
        rows += file_rows
    if not rows:
        raise ValueError(f"{', '.join(paths)}: no rows to evaluate")
    return rows


def score_rows(rows: list[dict], reward_manager) -> tuple[list[PromptResult], list[dict]]:
    """One PromptResult per row, and the per-sample scores/errors to write back."""
    texts, sources, truths, extras, owners = [], [], [], [], []
    for index, row in enumerate(rows):
        for text in row["responses"]:
            texts.append(text)
            sources.append(row["data_source"])
            truths.append(get_field(row, GROUND_TRUTH_KEY))
            extras.append(row.get("extra_info"))
            owners.append(index)
    scored = reward_manager.score_texts(texts, sources, truths, extras)
    results = [PromptResult(row["data_source"]) for row in rows]
    details = [{"scores": [], "accs": [], "errors": []} for _ in rows]
    for owner, outcome in zip(owners, scored):
        results[owner].accs.append(outcome["acc"])
        results[owner].scores.append(outcome["score"])
        details[owner]["scores"].append(outcome["score"])
        details[owner]["accs"].append(outcome["acc"])
        details[owner]["errors"].append(outcome.get("error"))
    return results, details


def prompt_fingerprints(rows: list[dict]) -> dict[str, str]:
    """Per data source, the sha256 of its rows' prompts in order: which problems an evaluation saw, so that a
    report can be matched with a data file later without keeping a copy of the problems."""
    digests = {}
    for row in rows:
        prompt = json.dumps(get_field(row, "prompt", None), sort_keys=True, default=str)
        digests.setdefault(row["data_source"], hashlib.sha256()).update(prompt.encode() + b"\n")
    return {source: digest.hexdigest() for source, digest in sorted(digests.items())}


def evaluate(paths: list[str], reward_manager, grader: dict, max_error_frac: float = 0.5) -> dict:
    """{"results": summarize(...), "protocol": generation settings + grader, "files", "prompts_sha256"
    (prompt_fingerprints), "reward_errors"}.

    ValueError when more than `max_error_frac` of the responses failed to score (the scorer raised or
    timed out): each would count as a wrong answer, so an accuracy of such a run measures the scorer."""
    rows = load_scored_inputs(paths)
    results, details = score_rows(rows, reward_manager)
    errors = [error for detail in details for error in detail["errors"]]
    sources = [row["data_source"] for row, detail in zip(rows, details) for _ in detail["errors"]]
    failure = too_many_errors(reward_manager, sources, {"error": errors}, max_error_frac,
                              settings=("--max-error-frac", "--timeout-s"))
    if failure:
        raise ValueError(f"{', '.join(paths)}: {failure}")
    settings = {json.dumps(row.get("generation"), sort_keys=True, default=str) for row in rows}
    generation = json.loads(settings.pop()) if len(settings) == 1 else "mixed (files generated with different settings)"
    return {"results": summarize(results), "protocol": {"generation": generation, "grader": grader},
            "files": [str(Path(p)) for p in paths], "prompts_sha256": prompt_fingerprints(rows),
            "reward_errors": sum(error is not None for error in errors), "answer_formats": answer_formats(rows),
            **({"at_length_limit": limited} if (limited := at_length_limit(rows)) else {}),
            **({"tool_use": tools} if (tools := tool_figures(rows)) else {})}


def tool_figures(rows: list[dict]) -> dict[str, dict[str, float]]:
    """Per data source, what its tool-using episodes did (multi_turn_metrics, under flat names: `tool_call_rate`,
    `num_turns`, `tool_errors`, `stop_reason_<reason>`, ...); empty when no row holds episodes."""
    episodes: dict[str, dict[str, list]] = {}
    for row in rows:
        for key, values in (row.get("episodes") or {}).items():
            episodes.setdefault(row["data_source"], {}).setdefault(key, []).extend(values)
    return {source: {flat_tool_name(key): value for key, value in multi_turn_metrics(columns).items()}
            for source, columns in sorted(episodes.items())}


def flat_tool_name(key: str) -> str:
    """`tool/call_rate` -> `tool_call_rate`, `multi_turn/num_turns/mean` -> `num_turns`,
    `multi_turn/stop_reason/length` -> `stop_reason_length`: one name under `eval/<data source>/`."""
    return key.removeprefix("multi_turn/").removesuffix("/mean").replace("/", "_")


def answer_formats(rows: list[dict]) -> dict[str, dict[str, float]]:
    """Per data source, the share of responses holding each answer format (core/reward/answer_formats.py): what
    the model writes, to hold against what the grader reads."""
    texts: dict[str, list[str]] = {}
    for row in rows:
        texts.setdefault(row["data_source"], []).extend(row["responses"])
    return {source: format_shares(responses) for source, responses in sorted(texts.items())}


def at_length_limit(rows: list[dict]) -> dict[str, float]:
    """Per data source, the share of responses that used every token their generation allowed (`response_lengths`
    against `generation.max_tokens`): cut off, not finished, so an answer is rarely there to grade. Empty for
    files without those fields (responses written elsewhere)."""
    counts: dict[str, list[int]] = {}
    for row in rows:
        limit = (row.get("generation") or {}).get("max_tokens")
        lengths = row.get("response_lengths")
        if limit is None or lengths is None:
            continue
        cut, total = counts.setdefault(row["data_source"], [0, 0])
        counts[row["data_source"]] = [cut + sum(int(length) >= limit for length in lengths), total + len(lengths)]
    return {source: cut / total for source, (cut, total) in sorted(counts.items()) if total}


def format_report(report: dict) -> str:
    """A markdown table: one row per data source, mean@n and pass@k columns; then the answer formats' shares."""
    results = report["results"]
    columns = sorted({k for figures in results.values() for k in figures if "@" in k}, key=_column_order)
    lines = ["| data source | prompts | " + " | ".join(columns) + " |", "|---|---|" + "---|" * len(columns)]
    for source, figures in results.items():
        cells = " | ".join(f"{figures[c]:.3f}" if c in figures else "" for c in columns)
        lines.append(f"| {source} | {int(figures['num_prompts'])} | {cells} |")
    for source, shares in (report.get("answer_formats") or {}).items():
        written = ", ".join(f"{share:.1%} {label}" for label, share in shares.items())
        limited = (report.get("at_length_limit") or {}).get(source)
        cut = "" if limited is None else f"; {limited:.1%} stopped at the token limit"
        lines.append(f"\n{source} responses containing: {written}{cut}")
    for source, figures in (report.get("tool_use") or {}).items():
        lines.append(f"\n{source} episodes: tool-call rate {figures['tool_call_rate']:.3f}, {figures['num_turns']:.2f} "
                     f"turns, {figures['tool_errors']:.2f} tool errors per episode")
    return "\n".join(lines)


def _column_order(column: str) -> tuple[int, int]:
    kind, k = column.split("@")
    return (0 if kind == "mean" else 1, int(k))
