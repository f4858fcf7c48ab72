"""MATH / AIME / AMC scorer: `math_verify` parse + verify of the model's final answer.

Which answer is read:
- the content of the LAST `\\boxed{...}` (or `\\fbox{...}`): earlier boxes are drafts. Left to
  itself, math_verify joins every box into a set, so `\\boxed{3} ... \\boxed{5}` would match
  neither 3 nor 5.
- a last box that never closes (the response was cut off) scores 0: the answer is unfinished.
- no box at all: math_verify's extraction over the whole text, which takes the last LaTeX or
  plain expression, preferring one after "final answer is"/"answer:". So "so the answer is 204"
  scores 1 against "204", as in verl's math_verify scorer and lighteval. A reward for the boxed
  format itself is a separate term, not this scorer's job.
The ground truth may be bare (`\\frac12`, `25`) or boxed; it is boxed before parsing so
math_verify reads it as a LaTeX answer, the same path as the prediction.
"""

from __future__ import annotations

import threading

from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

_BOX_OPENERS = ("\\boxed{", "\\fbox{")
# Boxes first (priority 0), then LaTeX / plain expressions for responses without one.
_EXTRACTION = (LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig())
# math_verify's own per-call limit. It uses signal.alarm, which only works in a main thread; off
# the main thread we pass None, and the pool reward manager's per-sample timeout is the limit.
MATH_VERIFY_TIMEOUT_S = 5


def compute_score(solution_str: str, ground_truth, format_score: float = 0.0) -> float:
    """1.0 when the final answer equals `ground_truth` mathematically; `format_score` when an answer was read but
    differs (GSM8K's `format_score` convention, 0 for MATH); 0.0 when none was (never raises on bad LaTeX)."""
    answer = final_answer(solution_str)
    if answer is None:
        return 0.0
    limit = MATH_VERIFY_TIMEOUT_S if threading.current_thread() is threading.main_thread() else None
    gold = parse(_boxed(str(ground_truth)), _EXTRACTION, parsing_timeout=limit)
    predicted = parse(answer, _EXTRACTION, parsing_timeout=limit)
    if not gold or not predicted:
        return 0.0
    return 1.0 if verify(gold, predicted, timeout_seconds=limit) else float(format_score)


def final_answer(solution_str: str) -> str | None:
    """The text math_verify should read: the last box, boxed again; the whole text when there is
    no box; None when the last box never closes."""
    if not any(opener in solution_str for opener in _BOX_OPENERS):
        return solution_str
    content = last_boxed(solution_str)
    return None if content is None else "\\boxed{" + content + "}"


def last_boxed(text: str) -> str | None:
    """The content of the last `\\boxed{...}` / `\\fbox{...}`; None when there is none or it never closes."""
    start = max(text.rfind(opener) + len(opener) if opener in text else -1 for opener in _BOX_OPENERS)
    if start < 0:
        return None
    depth = 1
    for position in range(start, len(text)):
        if text[position] == "{":
            depth += 1
        elif text[position] == "}":
            depth -= 1
            if depth == 0:
                return text[start:position]
    return None


def _boxed(ground_truth: str) -> str:
    truth = ground_truth.strip()
    boxed = last_boxed(truth)
    if boxed is not None:
        truth = boxed
    return "\\boxed{" + truth.strip("$ ") + "}"
