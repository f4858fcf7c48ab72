"""`recipezoo preference-pairs`: a preference set from a policy's own responses, graded by the rule scorer.

For each prompt, a response the scorer marks right (acc = 1) is paired, as `chosen`, with one it marks wrong
(acc = 0) as `rejected`: pairs that teach a reward model what the rule rewards, on the policy's own
distribution of answers, with no human labels and nothing downloaded. Prompts whose responses were all right,
all wrong, or failed to score give no pair; each such case is counted in the summary, not dropped unsaid.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from core.data.dataset import get_field, write_rows
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
        raise ValueError(f"no prompt of {len(rows)} had both a right and a wrong response ({_counts_line(counts)}); "
                         "sample more responses per prompt (--n) or at a higher --temperature")
    return write_rows(pairs, out), len(pairs), len(rows), counts


def _counts_line(counts: dict) -> str:
    return ", ".join(f"{count} {why}" for why, count in counts.items() if count) or "none left out"


def add_parser(commands) -> None:
    from core.eval.commands import _add_generation_args

    parser = commands.add_parser("preference-pairs", help="pair a policy's right and wrong responses per prompt "
                                                           "(the rule scorer grades them) into a preference set")
    _add_generation_args(parser)
    parser.add_argument("--responses", nargs="+", help="`recipezoo generate` output(s) (use --n > 1 and a "
                                                        "temperature > 0); or give --model and --data to generate")
    parser.add_argument("--out", required=True, help="output .parquet (or .jsonl): prompt, chosen, rejected")
    parser.add_argument("--max-pairs-per-prompt", type=int, default=1)
    parser.add_argument("--gsm8k-method", default="strict", help="GSM8K grader, as `recipezoo eval`")
    parser.set_defaults(handler=_command, reward_manager="naive", timeout_s=10.0, custom_function=None)


def _command(args: argparse.Namespace) -> int:
    from core.eval.commands import _reward_manager, _spec
    from core.eval.generate import generate_responses

    out = Path(args.out)
    try:
        if args.max_pairs_per_prompt < 1:
            raise ValueError(f"--max-pairs-per-prompt={args.max_pairs_per_prompt}: must be at least 1")
        responses = args.responses
        if not responses:
            responses = [str(generate_responses(_spec(args), out.with_name(out.stem + "_responses.parquet")))]
        with _reward_manager(args) as reward_manager:
            path, pairs, prompts, counts = write_preference_pairs(responses, reward_manager, out, args.max_pairs_per_prompt)
    except (ValueError, FileNotFoundError) as error:
        print(f"recipezoo preference-pairs: {error}", file=sys.stderr)
        return 1
    print(f"wrote {path}: {pairs} pairs from {prompts} prompts; prompts without a pair: {_counts_line(counts)}",
          flush=True)
    return 0
