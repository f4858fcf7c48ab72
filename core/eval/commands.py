"""`recipezoo generate`, `recipezoo eval` and `recipezoo preference-pairs` argument parsing and handlers; what they
drive (torch, transformers, the engines) is imported when a command runs, not when the CLI builds its parser."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from core.reward.gsm8k import GSM8K_METHODS

if TYPE_CHECKING:  # the generation stack (torch, transformers, engines) loads when a command runs
    from core.eval.generate import GenerationSpec


def add_parser(commands) -> None:
    generation = argparse.ArgumentParser(add_help=False)
    _add_generation_args(generation)
    generate = commands.add_parser("generate", parents=[generation],
                                   help="sample n responses per prompt into a parquet file")
    generate.add_argument("--out", required=True, help="output .parquet (or .jsonl)")
    generate.set_defaults(handler=_generate_command)

    evaluate = commands.add_parser("eval", parents=[generation],
                                   help="score responses: mean@n and pass@k per data source (json + MLflow)")
    evaluate.add_argument("--responses", nargs="+", help="`recipezoo generate` output(s); or give --model "
                                                         "and --data to generate first")
    evaluate.add_argument("--out", default="eval/metrics.json", help="metrics json (a .md table is written next to it)")
    evaluate.add_argument("--gsm8k-method", choices=GSM8K_METHODS, default="strict",
                          help="GSM8K grader: strict `#### N` (verl default), flexible (last number) or math_verify "
                               "(last \\boxed{}, else the final expression)")
    evaluate.add_argument("--reward-manager", choices=["naive", "pool"], default="pool")
    evaluate.add_argument("--timeout-s", type=float, default=10.0, help="per-sample scorer time limit (pool)")
    evaluate.add_argument("--max-error-frac", type=float, default=0.5,
                          help="refuse (exit 1, nothing written) when more than this share of the responses failed "
                               "to score: raised or timed out (as the trainer's reward.max_error_frac)")
    evaluate.add_argument("--custom-function", metavar="FILE.py:NAME", help="score every row with this function")
    evaluate.add_argument("--mlflow-uri", default=None, help="tracking URI (default: sqlite:///<cwd>/mlflow.db)")
    evaluate.add_argument("--experiment", default="recipezoo-eval")
    evaluate.add_argument("--run-name", default=None)
    evaluate.add_argument("--tag", action="append", default=[], metavar="KEY=VALUE",
                          help="an MLflow tag of the eval run (repeatable), e.g. to group runs for a leaderboard")
    evaluate.add_argument("--no-mlflow", action="store_true", help="write the json only")
    evaluate.set_defaults(handler=_eval_command)


def _add_generation_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", help="HF id, local dir, embedded://tiny-arith or pypi://SmolLM2-135M-Instruct")
    parser.add_argument("--gguf-file", default=None, help="a .gguf file inside --model")
    parser.add_argument("--data", nargs="+", help="prompt files in verl's schema (`recipezoo data` writes them)")
    parser.add_argument("--n", type=int, default=1, help="samples per prompt")
    parser.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--top-k", type=int, default=0, help="0 = off")
    parser.add_argument("--max-tokens", type=int, default=512, help="max new tokens per response")
    parser.add_argument("--max-prompt-length", type=int, default=1024, help="tokens; longer prompts are an error")
    parser.add_argument("--batch-size", type=int, default=64, help="prompts per generate call")
    parser.add_argument("--max-samples", type=int, default=None, help="only the first N prompts")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rollout", default="hf", help="rollout backend (rollout.name)")
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.5,
                        help="vllm/sglang: the engine's share of the GPU, e.g. beside another job on it")


def _spec(args: argparse.Namespace) -> GenerationSpec:
    from core.eval.generate import GenerationSpec

    missing = [flag for flag, value in (("--model", args.model), ("--data", args.data)) if not value]
    if missing:
        raise ValueError(f"{' and '.join(missing)} required to generate")
    if args.n < 1 or args.max_tokens < 1:
        raise ValueError(f"--n={args.n} and --max-tokens={args.max_tokens} must be at least 1")
    if not 0 < args.gpu_memory_utilization <= 1:
        raise ValueError(f"--gpu-memory-utilization={args.gpu_memory_utilization:g}: must be in (0, 1]")
    return GenerationSpec(model=args.model, data=tuple(args.data), gguf_file=args.gguf_file, n=args.n,
                          temperature=args.temperature, top_p=args.top_p, top_k=args.top_k,
                          max_tokens=args.max_tokens, max_prompt_length=args.max_prompt_length,
                          batch_size=args.batch_size, max_samples=args.max_samples, seed=args.seed,
                          rollout=args.rollout, device=args.device,
                          gpu_memory_utilization=args.gpu_memory_utilization)


def _generate_command(args: argparse.Namespace) -> int:
    from core.eval.generate import generate_responses

    try:
        out = generate_responses(_spec(args), args.out)
    except (ValueError, FileNotFoundError) as error:
        print(f"recipezoo generate: {error}", file=sys.stderr)
        return 1
    print(f"wrote {out}", flush=True)
    return 0


def _eval_command(args: argparse.Namespace) -> int:
    from core.eval.evaluate import evaluate, format_report
    from core.eval.generate import generate_responses

    out = Path(args.out)
    try:
        parse_tags(args.tag)  # a malformed --tag fails before any work
        if not 0.0 <= args.max_error_frac <= 1.0:
            raise ValueError(f"--max-error-frac={args.max_error_frac:g}: expected a share between 0 and 1")
        responses = args.responses
        if not responses:
            responses = [str(generate_responses(_spec(args), out.with_name(out.stem + "_responses.parquet")))]
        grader = {"gsm8k_method": args.gsm8k_method, "custom_function": args.custom_function}
        with _reward_manager(args) as reward_manager:
            report = evaluate(responses, reward_manager, grader, args.max_error_frac)
    except (ValueError, FileNotFoundError) as error:
        print(f"recipezoo eval: {error}", file=sys.stderr)
        return 1
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    table = format_report(report)
    out.with_suffix(".md").write_text(table + "\n")
    print(table, flush=True)
    if not args.no_mlflow:
        _log_to_mlflow(args, report, out)
    print(f"wrote {out} and {out.with_suffix('.md')}", flush=True)
    return 0


def _reward_manager(args: argparse.Namespace):
    from omegaconf import OmegaConf

    from core.reward.build import build_reward_manager

    path, _, name = (args.custom_function or "").partition(":")
    reward = OmegaConf.create({"manager": args.reward_manager, "num_workers": 2, "timeout_s": args.timeout_s,
                               "gsm8k_method": args.gsm8k_method, "format_score": 0.0,
                               "custom_function": {"path": path or None, "name": name or "compute_score"}})
    return build_reward_manager(reward, tokenizer=None)


def _log_to_mlflow(args: argparse.Namespace, report: dict, out: Path) -> None:
    from core.tracking.mlflow_tracker import MLflowTracker

    protocol = report["protocol"]
    config = {"generation": protocol["generation"], "grader": protocol["grader"], "files": report["files"]}
    run_name = args.run_name or f"eval-{Path(report['files'][0]).stem}"
    with MLflowTracker(args.mlflow_uri, args.experiment, run_name, config, seed=args.seed,
                       tags=parse_tags(args.tag)) as tracker:
        metrics = {f"eval/{source}/{key}": value for source, figures in report["results"].items()
                   for key, value in figures.items()}
        metrics |= {f"eval/{source}/{key}": value for source, figures in (report.get("tool_use") or {}).items()
                    for key, value in figures.items()}
        metrics |= {f"eval/{source}/at_length_limit": share
                    for source, share in (report.get("at_length_limit") or {}).items()}
        tracker.log_metrics({**metrics, "eval/reward_errors": report["reward_errors"]}, step=0)
        tracker.log_artifact(out)
        print(f"mlflow run {tracker.run_id}; view with: {tracker.ui_hint()}", flush=True)


def parse_tags(pairs: list[str]) -> dict[str, str]:
    """`["stage=after", "recipe=grpo"]` -> {"stage": "after", "recipe": "grpo"}."""
    tags = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--tag {pair!r}: expected KEY=VALUE")
        tags[key] = value
    return tags


def add_preference_pairs_parser(commands) -> None:
    parser = commands.add_parser("preference-pairs", help="pair a policy's right and wrong responses per prompt "
                                                           "(the rule scorer grades them) into a preference set")
    _add_generation_args(parser)
    parser.add_argument("--responses", nargs="+", help="`recipezoo generate` output(s) (use --n > 1 and a "
                                                        "temperature > 0); or give --model and --data to generate")
    parser.add_argument("--out", required=True, help="output .parquet (or .jsonl): prompt, chosen, rejected")
    parser.add_argument("--max-pairs-per-prompt", type=int, default=1)
    parser.add_argument("--gsm8k-method", default="strict", help="GSM8K grader, as `recipezoo eval`")
    parser.set_defaults(handler=_preference_pairs_command, reward_manager="naive", timeout_s=10.0,
                        custom_function=None)


def _preference_pairs_command(args: argparse.Namespace) -> int:
    from core.eval.generate import generate_responses
    from core.eval.preference_pairs import counts_line, write_preference_pairs

    out = Path(args.out)
    try:
        if args.max_pairs_per_prompt < 1:
            raise ValueError(f"--max-pairs-per-prompt={args.max_pairs_per_prompt}: must be at least 1")
        responses = args.responses
        if not responses:
            responses = [str(generate_responses(_spec(args), out.with_name(out.stem + "_responses.parquet")))]
        with _reward_manager(args) as reward_manager:
            path, pairs, prompts, counts = write_preference_pairs(responses, reward_manager, out,
                                                                  args.max_pairs_per_prompt)
    except (ValueError, FileNotFoundError) as error:
        print(f"recipezoo preference-pairs: {error}", file=sys.stderr)
        return 1
    print(f"wrote {path}: {pairs} pairs from {prompts} prompts; prompts without a pair: {counts_line(counts)}",
          flush=True)
    return 0
