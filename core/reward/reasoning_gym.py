"""Score reasoning-gym tasks with each task's own verifier (`score_answer`).

Rows written by `recipezoo data reasoning-gym` (core/data/reasoning_gym.py) have data_source
`reasoning_gym/<task>` and, as ground truth, the generator's entry as JSON (question, answer, metadata):
what `score_answer(answer, entry)` reads. Our part is only to find the answer in a response:

1. the last `<answer>…</answer>` (reasoning-gym's own `extract_answer`), when the response has one;
2. else the last non-empty line, without a leading `Answer:` / `The answer is` / `Final answer:`, a trailing
   period or Markdown bold, and only what follows its last `=` (`3 + 4 = 7` answers 7).

Rule 2 is ours, for models too small to follow the tag instruction at first (SmolLM2-135M never writes the
tags unprompted); it is one rule for every task and model, so a row's figures compare with every other row's.
The score is the verifier's (some tasks give partial credit, e.g. 0.01 for a number of the wrong value); a
response is *correct* (`acc` 1) only at the full score 1.0.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache

DATA_SOURCE_PREFIX = "reasoning_gym/"
_TAGGED = re.compile(r"<answer>\s?(.*?)\s?</answer>", re.DOTALL)
_LEAD_IN = re.compile(r"^(?:the\s+)?(?:final\s+)?answer(?:\s+is)?\s*[:=]?\s*", re.IGNORECASE)


def is_reasoning_gym(data_source: str) -> bool:
    return data_source.startswith(DATA_SOURCE_PREFIX)


def task_name(data_source: str) -> str:
    return data_source[len(DATA_SOURCE_PREFIX):]


def extract_answer(response: str) -> str:
    """The answer a response gives, by the two rules of the module docstring ('' when it is empty)."""
    tagged = _TAGGED.findall(response)
    if tagged:
        return tagged[-1].strip()
    lines = [line.strip() for line in response.splitlines() if line.strip()]
    if not lines:
        return ""
    line = _LEAD_IN.sub("", lines[-1].replace("**", "").strip())
    if "=" in line:
        line = line.rsplit("=", 1)[1]
    return line.strip().rstrip(".").strip()


@lru_cache(maxsize=None)
def _verifier(task: str):
    import reasoning_gym

    return reasoning_gym.get_score_answer_fn(task)


def compute_score(response: str, ground_truth) -> dict:
    """{"score": the task verifier's score in [0, 1], "acc": 1.0 only for a full score}.

    `ground_truth` is the row's entry JSON with a `task` key (core/data/reasoning_gym.py).
    """
    entry = json.loads(ground_truth) if isinstance(ground_truth, str) else dict(ground_truth)
    score = float(_verifier(entry["task"])(extract_answer(response), entry) or 0.0)
    return {"score": score, "acc": float(score >= 1.0)}
