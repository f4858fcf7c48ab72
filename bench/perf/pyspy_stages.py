"""Where a training job's host time goes, from a py-spy profile: per part of the loop, and inside generation,
how much the engine spends on per-token log-prob bookkeeping.

    py-spy record --subprocesses --rate 50 --format raw --output spy.txt -- python3 -m bench.leaderboard.driver ...
    python -m bench.perf.pyspy_stages spy.txt --process bench.leaderboard.job --rate 50 --out results/.../profile.json

py-spy samples Python stacks of threads that are running (not idle), so a part's seconds are host time spent
in it: for a small model on a GPU, where the host is the bottleneck, close to its wall time.
"""

from __future__ import annotations

import argparse
import gzip
import json
from collections import Counter
from pathlib import Path

# The first frame (outermost first) naming one of these decides the part of the job a sample belongs to.
PARTS = (("next_rollout", "training generation"), ("BaseTrainer.validate", "validation"),
         ("generate_responses", "evaluation"), ("score_rows", "evaluation scoring"),
         ("BaseTrainer.compute_log_probs", "old_log_prob (and reference)"),
         ("BaseTrainer.update_policy", "update_actor"), ("BaseTrainer.sync_weights", "sync_weights"),
         ("BaseTrainer.fit", "rest of the loop (reward, advantages, logging)"), ("BaseTrainer.__init__", "setup"))
GENERATION_PARTS = ("training generation", "validation", "evaluation")
# Inside generation: the first of these any frame names (innermost wins over outer engine frames).
ENGINE_PARTS = (("Logprobs", "log-prob bookkeeping"), ("OutputProcessor.process_outputs", "output processing"),
                ("EngineCore.step", "engine core: schedule, model, sample"))


def read_samples(path: Path, process: str) -> Counter:
    """Collapsed stacks (py-spy --format raw) of the processes whose command line contains `process`."""
    opener = gzip.open if path.suffix == ".gz" else open
    stacks = Counter()
    with opener(path, "rt") as lines:
        for line in lines:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            frames = stack.split(";")
            roots = [i for i, frame in enumerate(frames) if frame.startswith("process ") and process in frame]
            if roots and count.isdigit():
                own = frames[roots[-1] + 1:]
                # A child process (a compile worker, a probe) is the job's work, but not its loop's.
                child = any(frame.startswith("process ") for frame in own)
                stacks[("child processes",) if child else tuple(own)] += int(count)
    return stacks


def first_match(frames: tuple[str, ...], table) -> str | None:
    for needle, name in table:
        if any(needle in frame for frame in frames):
            return name
    return None


def summarize(stacks: Counter, rate_hz: float) -> dict:
    parts, engine = Counter(), {name: Counter() for name in GENERATION_PARTS}
    for frames, count in stacks.items():
        part = first_match(frames, PARTS) or ("child processes" if frames == ("child processes",)
                                              else "other (imports, the autograd thread, idle engine threads)")
        parts[part] += count
        if part in engine:
            engine[part][first_match(frames, ENGINE_PARTS) or "rollout backend and the rest"] += count
    seconds = {name: round(count / rate_hz, 1) for name, count in parts.most_common()}
    inside = {part: {name: round(count / rate_hz, 1) for name, count in counts.most_common()}
              for part, counts in engine.items() if counts}
    log_prob_share = {part: round(counts["log-prob bookkeeping"] / sum(counts.values()), 3)
                      for part, counts in engine.items() if counts}
    return {"sampled_seconds": round(sum(parts.values()) / rate_hz, 1), "parts_s": seconds,
            "generation_s": inside, "log_prob_bookkeeping_share": log_prob_share}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile", type=Path, help="py-spy --format raw output (.gz allowed)")
    parser.add_argument("--process", default="bench.leaderboard.job", help="a substring of the job's command line")
    parser.add_argument("--rate", type=float, default=50, help="py-spy's --rate (samples per second)")
    parser.add_argument("--command", default="", help="the command that recorded the profile, kept in --out")
    parser.add_argument("--out", type=Path, help="write the summary here as json")
    args = parser.parse_args(argv)
    stacks = read_samples(args.profile, args.process)
    if not stacks:
        parser.error(f"{args.profile}: no samples of a process whose command line contains {args.process!r}")
    summary = {"profile": args.profile.name, "process": args.process, "rate_hz": args.rate,
               "command": args.command, **summarize(stacks, args.rate)}
    print(json.dumps(summary, indent=2))
    if args.out:
        args.out.write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
