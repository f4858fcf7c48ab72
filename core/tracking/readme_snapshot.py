"""The README's snapshot of the leaderboard: the ranked reasoning-gym suite, one row per recipe.

    python -m core.tracking.readme_snapshot            # rewrite the block in README.md
    python -m core.tracking.readme_snapshot --check    # exit 1 if the block is stale

Only the text between `<!-- BEGIN leaderboard-snapshot -->` and `<!-- END leaderboard-snapshot -->` is
rewritten, from `results/reasoning_gym/leaderboard.json`, which `recipezoo leaderboard` writes beside
the full table: so the README's numbers are the leaderboard's, never typed by hand.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SOURCE = "results/reasoning_gym/leaderboard.json"
FULL_TABLE = "results/reasoning_gym/leaderboard.md"
BLOCK = re.compile(r"(<!-- BEGIN leaderboard-snapshot -->\n)(?P<body>.*?)(<!-- END leaderboard-snapshot -->)", re.S)
SUITE, GSM8K = "suite mean", "openai/gsm8k mean@1 (strict)"


def before_after(before: float | None, after: dict) -> str:
    start = "—" if before is None else f"{before:.3f}"
    return f"{start} → {after['mean']:.3f} ± {after['std']:.3f}"


def steps_text(steps: list[int]) -> str:
    return str(steps[0]) if min(steps) == max(steps) else f"{min(steps)}–{max(steps)}"


def render_snapshot(board: dict, source: str = SOURCE) -> str:
    """The block's body: per pretrained model, a table of recipe, rank, suite mean and GSM8K strict as
    `before → after mean ± std` (rows of different models are never compared, so never share a table)."""
    section = board["before_after"]
    lines = [f"Generated from `{source}` by `python -m core.tracking.readme_snapshot` (do not edit); "
             f"the full tables, their protocol and budgets: [{FULL_TABLE}]({FULL_TABLE})."]
    for model in sorted({row["model"] for row in section["rows"]}, key=str.lower, reverse=True):
        before = section["before"].get(model, {})
        lines += ["", f"`{model}`:", "", "| recipe | rank | reasoning-gym suite mean | GSM8K strict | seeds | steps |",
                  "|---|---:|---:|---:|---:|---:|"]
        lines += [f"| {row['recipe']} | {row['rank']} | {before_after(before.get(SUITE), row[SUITE])} | "
                  f"{before_after(before.get(GSM8K), row[GSM8K])} | {row['seeds']} | {steps_text(row['steps'])} |"
                  for row in section["rows"] if row["model"] == model]
    lines += ["", "Each cell is `before → after` RL, after as mean ± std over the seeds; *rank* comes from "
              "Holm-corrected pairwise Welch tests within one model's rows, and recipes no test separates share a rank."]
    return "\n".join(lines) + "\n"


def updated_readme(readme_text: str, board: dict) -> str:
    if not BLOCK.search(readme_text):
        raise ValueError("README.md has no <!-- BEGIN leaderboard-snapshot --> ... <!-- END leaderboard-snapshot --> block")
    return BLOCK.sub(lambda match: match.group(1) + render_snapshot(board) + match.group(3), readme_text)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    readme = REPO / "README.md"
    text = readme.read_text(encoding="utf-8")
    updated = updated_readme(text, json.loads((REPO / SOURCE).read_text(encoding="utf-8")))
    if "--check" in argv:
        if updated != text:
            print("README.md's leaderboard snapshot is stale: run python -m core.tracking.readme_snapshot")
            return 1
        return 0
    if updated != text:
        readme.write_text(updated, encoding="utf-8")
        print("rewrote README.md's leaderboard snapshot")
    return 0


if __name__ == "__main__":
    sys.exit(main())
