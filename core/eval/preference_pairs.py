"""A preference set from a policy's own responses, graded by the rule scorer.

For each prompt, a response the scorer marks right (acc = 1) is paired, as `chosen`, with one it marks wrong
(acc = 0) as `rejected`: pairs that teach a reward model what the rule rewards, on the policy's own
distribution of answers, with no human labels and nothing downloaded. Prompts whose responses were all right,
all wrong, or failed to score give no pair; each such case is counted in the summary, not dropped unsaid.
`recipezoo preference-pairs` (core/eval/commands.py) writes one.
"""

from __future__ import annotations

from pathlib import Path

from core.data.rows import get_field, write_rows
from core.eval.evaluate import GROUND_TRUTH_KEY, load_scored_inputs, score_rows


def preference_rows(rows: list[dict], details: list[dict], max_pairs_per_prompt: int) -> tuple[list[dict], dict]:
    """(pair rows, counts of prompts without a pair by reason); `details` are `score_rows`' per-sample outcomes."""
    pairs, counts = [], {"all right": 0, "all wrong": 0, "scorer failed on every response": 0}
    for row, detail in zip(rows, details):
        scored = [(text, acc) for text, acc, error in zip(row["responses"], detail["accs"], detail["errors"])
                  if error is None]
        right = list(dict.fromkeys(text for text, acc in scored if acc == 1.0))
        wrong = list(dict.fromkeys(text for text, acc in scored if acc == 0.0))
        if not scored:
            counts["scorer failed on every response"] += 1
        elif not wrong:
            counts["all right"] += 1
        elif not right:
            counts["all wrong"] += 1
        for chosen, rejected in list(zip(right, wrong))[:max_pairs_per_prompt]:
            pairs.append({"prompt": get_field(row, "prompt"), "chosen": chosen, "rejected": rejected,
                          "data_source": row["data_source"], "ground_truth": str(get_field(row, GROUND_TRUTH_KEY))})
    return pairs, counts


def write_preference_pairs(responses: list[str], reward_manager, out: str | Path, max_pairs_per_prompt: int = 1):
    """Grade `recipezoo generate` output and write the pairs to `out` (.parquet/.jsonl); returns (path, pairs,
    prompts, counts of prompts without a pair)."""
    rows = load_scored_inputs(responses)
    _, details = score_rows(rows, reward_manager)
    pairs, counts = preference_rows(rows, details, max_pairs_per_prompt)
    if not pairs:
        raise ValueError(f"no prompt of {len(rows)} had both a right and a wrong response ({counts_line(counts)}); "
                         "sample more responses per prompt (--n) or at a higher --temperature")
    return write_rows(pairs, out), len(pairs), len(rows), counts


def counts_line(counts: dict) -> str:
    """The prompts left without a pair, by reason: `3 all right, 1 all wrong`."""
    return ", ".join(f"{count} {why}" for why, count in counts.items() if count) or "none left out"
