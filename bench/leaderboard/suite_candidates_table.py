"""The table bench/leaderboard/suite_candidates.sh writes beside its `recipezoo eval` json: per reasoning-gym task, the test
problems evaluated, the model's greedy accuracy on them before any RL, their constant-answer share (the most common
answer's share: what always giving that answer scores, core/data/reasoning_gym.py) and the task's settings.

    python -m bench.leaderboard.suite_candidates_table OUT_JSON TEST_PARQUET COMMAND    # writes OUT_JSON's .md
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

from core.data.reasoning_gym import constant_answer
from core.data.rows import read_rows


def candidate_table(results: dict, test_rows: list[dict], command: str) -> str:
    """Markdown: the command, the generation settings, then one row per task in the order of `test_rows`."""
    rows_by_source = defaultdict(list)
    for row in test_rows:
        rows_by_source[row["data_source"]].append(row)
    generation = results["protocol"]["generation"]
    lines = [f"`{command}`", "",
             f"`{generation['model']}`, greedy, at most {generation['max_tokens']} new tokens, {generation['rollout']} "
             "rollout. On a CPU the hf rollout runs fp32; the leaderboard evaluates with vLLM in bf16 on a GPU, so its "
             "*before* figures can differ from these.", "",
             "| task | prompts | start accuracy | constant-answer share | most common answer | settings |",
             "|---|---:|---:|---:|---|---|"]
    for source, rows in rows_by_source.items():
        figures = results["results"][source]
        answer, share = constant_answer(rows)
        settings = ", ".join(f"{key}={value}" for key, value in json.loads(rows[0]["extra_info"]["difficulty"]).items())
        lines.append(f"| {source.split('/', 1)[1]} | {int(figures['num_prompts'])} | {figures['mean@1']:.2f} | "
                     f"{share:.2f} | `{answer[:30]!r}` | {settings or 'defaults'} |")
    overall = results["results"]["all"]
    lines.append(f"| all | {int(overall['num_prompts'])} | {overall['mean@1']:.3f} | | | |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    out_json, test_parquet, command = argv
    table = candidate_table(json.loads(Path(out_json).read_text()), read_rows(test_parquet), command)
    Path(out_json).with_suffix(".md").write_text(table, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
