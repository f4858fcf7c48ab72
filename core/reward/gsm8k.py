"""GSM8K scorer, behaviour-compatible with verl's `verl/utils/reward_score/gsm8k.py`.

Scores must compare with published verl runs, so the extraction rules (and their quirks) are
kept exactly: only the last 300 characters are searched; strict mode wants `#### <number>`;
flexible mode takes the last number-like token; the answer is compared to the ground truth as
an exact string. The one deliberate difference: a non-string ground truth (e.g. `72` from a
JSONL file) is compared as `str(ground_truth)`; verl would silently score it 0 forever.
"""

from __future__ import annotations

import re

# How a GSM8K answer is read (reward.gsm8k_method): strict and flexible are verl's (`#### N`; the last number, below);
# math_verify reads the last \boxed{} (else the final expression) as the MATH scorer does (core/reward/mathverify.py):
# what chat models write when not taught `####`.
GSM8K_METHODS = ("strict", "flexible", "math_verify")

# verl clips to the tail: regexes on very long responses are slow, and the answer is at the end.
SOLUTION_CLIP_CHARS = 300

_STRICT_ANSWER = re.compile(r"#### (\-?[0-9\.\,]+)")
_NUMBER_LIKE = re.compile(r"(\-?[0-9\.\,]+)")
# Tokens the number regex can match that are not answers.
_NOT_AN_ANSWER = ("", ".")


def extract_solution(solution_str: str, method: str = "strict") -> str | None:
    """The answer string in `solution_str`, or None when there is none.

    strict: the last `#### <number>` match, commas (and "$") removed.
    flexible: the last number-like token that is not "" or "."; verl does NOT strip commas here,
    so "1,234" stays "1,234" and will not match a ground truth of "1234".
    """
    if method not in ("strict", "flexible"):
        raise ValueError(f"gsm8k extract_solution: method must be 'strict' or 'flexible', got {method!r}")
    tail = solution_str[-SOLUTION_CLIP_CHARS:]
    if method == "strict":
        matches = _STRICT_ANSWER.findall(tail)
        if not matches:
            return None
        return matches[-1].replace(",", "").replace("$", "")
    matches = _NUMBER_LIKE.findall(tail)
    if not matches:
        return None
    for candidate in reversed(matches):
        if candidate not in _NOT_AN_ANSWER:
            return candidate
    # verl's loop leaves its variable on the first token when every token is invalid; keep that
    # so a "." response earns format_score exactly as it does in verl.
    return matches[0]


def compute_score(
    solution_str: str,
    ground_truth,
    method: str = "strict",
    format_score: float = 0.0,
    score: float = 1.0,
) -> float:
    """`score` for an exact match, `format_score` for an extracted but wrong answer, else 0."""
    answer = extract_solution(solution_str, method=method)
    if answer is None:
        return 0.0
    return float(score) if answer == str(ground_truth) else float(format_score)
