"""Whether a leaderboard job's step-0 validation would repeat the pretrained model's evaluation
(bench/leaderboard/driver.py passes trainer.val_before_train=false to its jobs where it would)."""

from __future__ import annotations

from pathlib import Path

from bench.leaderboard.suites import Suite
from bench.leaderboard.tiny_baselines import VARIANTS


def step_0_from_pretrained(args, suite: Suite, common: list[str], data: Path) -> bool:
    """Whether the pretrained model's evaluation is what a training job would validate at step 0, so that the
    jobs leave that validation out (seconds on an H100 alone; when jobs share the GPU, most of the
    `first_validation` in a job's start record is the wait for the others' engine starts, which stays) and the
    curves take their step 0 from the evaluation (core/leaderboard/eval_columns.py, with_pretrained_start): the
    evaluation runs (--eval-before) on the held-out file whole (no --eval-limit), one greedy response a prompt,
    and the runs validate every problem of it under the same new-token limit. At its defaults the GSM8K suite
    keeps its step-0 validation: its evaluation gives 512 new tokens to all 1,319 test problems, its runs'
    validation 384 to the first 256."""
    from core.config import load_config
    from core.data.rows import read_rows

    evaluation = next((s for s in suite.eval_sets if s[1] == suite.val_file), None)
    if not args.eval_before or args.eval_limit or evaluation is None:
        return False
    _, _, n, temperature, _, max_tokens, _ = evaluation
    # GRPO's config as the jobs get it; no variant's own overrides (variant_overrides) touch validation.
    config = load_config(VARIANTS["grpo"], [*common, *args.overrides])
    validated = config.data.val_max_samples
    return (n == 1 and temperature == 0 == config.rollout.val_temperature and config.rollout.val_n == 1
            and min(max_tokens, args.eval_max_tokens or max_tokens) == config.data.max_response_length
            and config.data.truncation == "error"  # any other would drop or cut prompts the evaluation keeps
            and (validated is None or validated >= len(read_rows(data / suite.val_file))))
