"""Which answer formats a batch of responses uses: the check behind the zero-first-rollout warning.

A reward that reads one format (GSM8K's strict `#### N`) scores 0 on every response of a model that
writes another (`\\boxed{N}`), and a run trained on it learns nothing without any error. The shares
here tell such a run apart from a model that answers wrongly.
"""

from __future__ import annotations

import re

from core.reward.gsm8k import SOLUTION_CLIP_CHARS

# (label, pattern): the formats the GSM8K / MATH scorers read. "last number" is what flexible reads.
FORMATS = (
    ("####", re.compile(r"#### ")),
    ("\\boxed{}", re.compile(r"\\(?:boxed|fbox)\{")),
    ("a last number", re.compile(r"[0-9]")),
)


def format_shares(texts: list[str]) -> dict[str, float]:
    """{format label: share of `texts` containing it}; the number is looked for where the scorers look (the tail)."""
    if not texts:
        return {label: 0.0 for label, _ in FORMATS}
    shares = {}
    for label, pattern in FORMATS:
        tails = texts if label != "a last number" else [text[-SOLUTION_CLIP_CHARS:] for text in texts]
        shares[label] = sum(bool(pattern.search(text)) for text in tails) / len(texts)
    return shares


def zero_reward_message(reward_name: str, texts: list[str]) -> str:
    """One line for a first rollout whose every response scored 0: the reward and what the responses contain."""
    shares = ", ".join(f"{share:.0%} {label}" for label, share in format_shares(texts).items())
    return (f"every one of the first rollout's {len(texts)} responses scored 0 under {reward_name}; the responses "
            f"contain {shares}. A reward that reads another answer format than the model writes trains nothing: "
            f"check reward.gsm8k_method (strict reads `#### N`, flexible the last number, math_verify the last "
            f"\\boxed{{}} or the final expression)")
