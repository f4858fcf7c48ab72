"""results/tool_use/gpu/README.md from the runs `bench/tool_use/gpu.sh` wrote (OUT/<engine>_<tool|single>/grpo.json):
the GSM8K tool recipe beside single-turn GRPO on the same model, prompts and budget, per rollout engine.

    python -m bench.tool_use.report [--results results/tool_use/gpu] [--host "what else the host ran"]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from bench.common.results_page import load_results, number_cell, table_header, table_row, write_page

ENGINES = {"vllm": "vLLM", "sglang": "SGLang"}
COLUMNS = ("engine", "rollout", "steps", "s/step", "gen s", "tool s", "old log-prob s", "update s", "turns/episode",
           "tool-call rate", "tool errors/episode", "score", "logprob_diff mean", "logprob_diff max",
           "response tokens", "peak GiB")
TURN_SPLIT = ("rollout/logprob_diff/first_turn_mean", "rollout/logprob_diff/later_turns_mean")
NUMBERS = ("steps", "s/step", "gen s", "tool s", "old log-prob s", "update s", "tool errors/episode", "logprob_diff mean",
           "logprob_diff max", "response tokens", "peak GiB")


def steady(steps: list[dict], key: str) -> float | None:
    """The median over the steps after the first (which also pays compilation and cache warm-up); the first step
    alone when the run made only one."""
    values = [step[key] for step in steps if key in step]
    return statistics.median(values[1:] or values) if values else None


def first_to_last(steps: list[dict], key: str, spec: str = ".2f") -> str:
    values = [step[key] for step in steps if key in step]
    return f"{values[0]:{spec}} → {values[-1]:{spec}}" if values else "–"


def run_row(name: str, report: dict) -> str:
    steps, tool_run = report["steps"], name.endswith("_tool")
    engine = ENGINES.get(name.split("_")[0], name.split("_")[0])
    rollout = ("multi-turn, Python tool" if tool_run else
               "single-turn, tool prompt" if name.endswith("_single_tags") else "single-turn")
    diffs = [step["rollout/logprob_diff/max"] for step in steps if "rollout/logprob_diff/max" in step]
    return table_row([
        engine, rollout, str(len(steps)),
        number_cell(steady(steps, "timing_s/step")), number_cell(steady(steps, "timing_s/gen")),
        number_cell(steady(steps, "timing_s/tool"), ".2f") if tool_run else "–",
        number_cell(steady(steps, "timing_s/old_log_prob")), number_cell(steady(steps, "timing_s/update_actor")),
        first_to_last(steps, "multi_turn/num_turns/mean") if tool_run else "1",
        first_to_last(steps, "tool/call_rate") if tool_run else "–",
        number_cell(steady(steps, "tool/errors"), ".2f") if tool_run else "–",
        first_to_last(steps, "critic/score/mean"), number_cell(steady(steps, "rollout/logprob_diff/mean"), ".4f"),
        number_cell(max(diffs) if diffs else None, ".3f"), number_cell(steady(steps, "response_length/mean"), ".0f"),
        number_cell(max(report["peak_memory_gib"] or [0.0]))])


def engine_reading(engine: str, tool: dict | None, single: dict | None, same_prompts: dict | None = None) -> list[str]:
    """Numbers a reader compares, per engine: how far the engine's log-probs sit from the trainer's in each run
    (a context the trainer rebuilt differently from what the engine sampled would show here), and what the tool
    run's policy did with the tool over its steps."""
    name, lines = ENGINES.get(engine, engine), []
    if tool and single:
        diff = {label: (statistics.mean(v["rollout/logprob_diff/mean"] for v in run["steps"]),
                        max(v["rollout/logprob_diff/max"] for v in run["steps"]))
                for label, run in (("tool", tool), ("single", single))}
        lines.append(f"- {name}: `rollout/logprob_diff` averages {diff['tool'][0]:.4f} per sampled token with the "
                     f"tool ({diff['single'][0]:.4f} single-turn), its largest single token {diff['tool'][1]:.3f} "
                     f"({diff['single'][1]:.3f} single-turn).")
    if same_prompts:
        mean = statistics.mean(step["rollout/logprob_diff/mean"] for step in same_prompts["steps"])
        lines.append(f"- {name}, single-turn on the tool run's prompts: `rollout/logprob_diff` averages {mean:.4f}, "
                     "with no context rebuilt: the token mix's own gap.")
    if tool and same_prompts:  # before any update every run samples from the same weights: the cleanest comparison
        at_start = {label: run["steps"][0]["rollout/logprob_diff/mean"] for label, run in
                    (("tool", tool), ("same", same_prompts), ("plain", single)) if run}
        plain = f", {at_start['plain']:.4f} single-turn on GSM8K's own prompts" if "plain" in at_start else ""
        first_step = tool["steps"][0]
        turns = (f" (first turn {first_step[TURN_SPLIT[0]]:.4f}, later turns {first_step[TURN_SPLIT[1]]:.4f})"
                 if all(key in first_step for key in TURN_SPLIT) else "")
        lines.append(f"- {name}, step 1 (the same pretrained weights in every run): `rollout/logprob_diff` "
                     f"{at_start['tool']:.4f} with the tool{turns}, {at_start['same']:.4f} single-turn on the same "
                     f"prompts{plain}.")
    if tool and all(TURN_SPLIT[0] in step for step in tool["steps"]):
        first, later = (statistics.mean(step[key] for step in tool["steps"]) for key in TURN_SPLIT)
        lines.append(f"- {name}, tool run: `rollout/logprob_diff` averages {first:.4f} on the first turn's sampled "
                     f"tokens and {later:.4f} on the later turns' (after a tool reply). Only the later turns' context "
                     "is rebuilt from the engine's ids and the tool replies, so a rebuild unlike the engine's context "
                     "would raise the second figure alone.")
    if tool:
        steps = tool["steps"]
        peak = max(steps, key=lambda step: step["tool/call_rate"])
        lines.append(f"- {name}, tool run: {len(steps)} steps; the tool-call rate went {steps[0]['tool/call_rate']:.2f}"
                     f" → {steps[-1]['tool/call_rate']:.2f} (highest {peak['tool/call_rate']:.2f}, step "
                     f"{peak['step']}), tool errors per episode at that step {peak['tool/errors']:.2f}; responses "
                     f"{steps[0]['response_length/mean']:.0f} → {steps[-1]['response_length/mean']:.0f} tokens; "
                     f"score {steps[0]['critic/score/mean']:.3f} → {steps[-1]['critic/score/mean']:.3f}.")
    return lines


def regenerate_flags(results: Path, host: str | None) -> str:
    """The flags that regenerate a page other than the default one: its folder and what else its host ran."""
    default = Path(__file__).resolve().parents[2] / "results" / "tool_use" / "gpu"
    if not host and results.resolve() == default:
        return ""
    folder = results.resolve().relative_to(default.parents[2]) if results.resolve().is_relative_to(default.parents[2]) \
        else results
    return f" --results {folder}" + (f' --host "{host}"' if host else "")


def page(results: Path, host: str | None = None) -> list[str]:
    paths = sorted(results.glob("*/grpo.json"))  # load_results reads them in this same order
    runs = dict(zip((path.parent.name for path in paths), load_results(paths), strict=True))
    if not runs:
        raise SystemExit(f"{results}: no */grpo.json (run bash bench/tool_use/gpu.sh MODEL first)")
    first = next(iter(runs.values()))
    lines = ["# The GSM8K tool recipe on one GPU, beside single-turn GRPO", "",
             f"Generated by `python -m bench.tool_use.report{regenerate_flags(results, host)}` from the runs of "
             "`bench/tool_use/gpu.sh`; do not edit.", "",
             f"- Model: `{first['model_dir']}`. Device: {first['device']}{f' ({host})' if host else ''}.",
             "- Both runs of an engine share the model, the prompts (GSM8K train, in order), 32 prompts × 8 episodes a "
             "step and 768 response tokens; the tool run's response holds every turn and every tool reply, and its "
             "prompt adds the tag instruction (`<python>code</python>`).",
             "- Times are medians over the steps after the first; `tool s` is the wall time of a step's tool phases "
             "(the sandboxed Python runs); turns, tool-call rate and score are first step → last step; "
             "`logprob_diff` compares the engine's sampling log-probs with the trainer's on the sampled tokens "
             "(max over the steps).", "",
             *table_header(*COLUMNS, right_aligned=NUMBERS)]
    lines += [run_row(name, report) for name, report in sorted(runs.items())]
    lines += ["", "Each run's steps, one by one: `<engine>_<tool|single>/README.md` beside this page.", "",
              "## What the runs show", ""]
    lines += [line for engine in sorted({name.split("_")[0] for name in runs})
              for line in engine_reading(engine, runs.get(f"{engine}_tool"), runs.get(f"{engine}_single"),
                                         runs.get(f"{engine}_single_tags"))]
    lines += ["", "Commands (each run's own):", ""]
    lines += [f"- {name}: `{report['command']}`" for name, report in sorted(runs.items())]
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default=str(Path(__file__).resolve().parents[2] / "results" / "tool_use" / "gpu"))
    parser.add_argument("--host", help="what else the host ran meanwhile, said beside the device (times depend on it)")
    args = parser.parse_args()
    print(write_page(Path(args.results) / "README.md", page(Path(args.results), args.host)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
