"""Rollout throughput on one GPU: our vLLM backend against raw `vllm.LLM.generate`, same engine, same prompts.

    python -m bench.perf.rollout_vllm_gpu --model-dir DIR --out results/rollout_vllm

DIR holds a HF config (and tokenizer); weights are vLLM's dummy ones, which is enough for
throughput. Both paths share one engine, so the difference is our backend's own work (unpadding the
prompts, building the padded response and log-prob tensors, the data-contract check). Rounds
alternate raw/ours so drift (clocks, allocator) hits both. Also measures what `sleep()` frees.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

from core.batch import Batch
from core.rollout.base import SamplingParams
from core.rollout.vllm import VLLMRollout, import_vllm


class _Tokenizer:
    """The two ids the backend needs; dummy weights make any vocabulary id a valid token."""

    def __init__(self, eos_token_id: int, pad_token_id: int):
        self.eos_token_id, self.pad_token_id = eos_token_id, pad_token_id


def prompt_batch(num_prompts: int, prompt_len: int, vocab: int, seed: int = 0) -> Batch:
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(1000, vocab - 1000, (num_prompts, prompt_len), generator=generator)
    return Batch({"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)},
                 {"index": __import__("numpy").arange(num_prompts).astype(object)})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--prompts", type=int, default=256)
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.6)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    vllm = import_vllm()
    config = json.loads((Path(args.model_dir) / "config.json").read_text())
    engine = vllm.LLM(model=args.model_dir, load_format="dummy", skip_tokenizer_init=True, dtype="bfloat16",
                      gpu_memory_utilization=args.gpu_memory_utilization, enforce_eager=True, enable_sleep_mode=True,
                      max_model_len=args.prompt_len + args.new_tokens, seed=0, logprobs_mode="processed_logprobs")
    eos = config["eos_token_id"]
    ours = VLLMRollout.from_engine(engine, _Tokenizer(eos, config.get("pad_token_id") or eos), can_sleep=True)
    prompts = prompt_batch(args.prompts, args.prompt_len, config["vocab_size"])
    raw_requests = [{"prompt_token_ids": row.tolist()} for row in prompts["input_ids"]]
    paths = {}
    for seeded in (True, False):  # a per-request seed makes vLLM sample request by request: slower
        seed = 1 if seeded else None
        params = SamplingParams(n=1, temperature=1.0, top_p=1.0, max_new_tokens=args.new_tokens, seed=seed)
        raw_params = vllm.SamplingParams(n=1, temperature=1.0, top_p=1.0, max_tokens=args.new_tokens, seed=seed,
                                         logprobs=0, flat_logprobs=True, stop_token_ids=[eos])
        label = "seeded" if seeded else "unseeded"
        paths[f"raw vllm.LLM.generate, {label}"] = _raw(engine, raw_requests, raw_params)
        paths[f"recipezoo VLLMRollout, {label}"] = _ours(ours, prompts, params)
    rounds = timed_rounds(paths, args.rounds)
    report = {
        "device": torch.cuda.get_device_name(), "vllm": vllm.__version__, "torch": torch.__version__,
        "model": config.get("_name_or_path") or Path(args.model_dir).name, "weights": "dummy (load_format=dummy)",
        "prompts": args.prompts, "prompt_len": args.prompt_len, "new_tokens": args.new_tokens,
        "sampling": "temperature 1.0, top_p 1.0, logprobs of the sampled token",
        "tokens_per_s": {name: sorted(values) for name, values in rounds.items()},
        "sleep": measure_sleep(ours),
        "command": "python " + " ".join(sys.argv),
    }
    median = {name: statistics.median(values) for name, values in rounds.items()}
    report["ours_over_raw"] = {label: median[f"recipezoo VLLMRollout, {label}"] / median[f"raw vllm.LLM.generate, {label}"]
                               for label in ("seeded", "unseeded")}
    report["weight_sync"] = check_weight_sync(ours, args.model_dir, prompts)
    write(report, Path(args.out))
    return 0


def round_order(names: list[str], round_index: int) -> list[str]:
    """The order the paths run in within one round of `timed_rounds` (reports pair engine calls with it)."""
    return names[::-1] if round_index % 2 else names


def timed_rounds(paths: dict, rounds: int) -> dict[str, list[float]]:
    """Tokens/s of each path per round, in round order; paths alternate within a round, in reverse order every
    other round, so drift (clocks, allocator) and whatever one call leaves the next (an engine's prefix cache, its
    scheduler's state) hit all of them alike. One warm-up call each first (allocations, graph replay)."""
    for fn in paths.values():
        fn()
    results = {name: [] for name in paths}
    for round_index in range(rounds):
        for name in round_order(list(paths), round_index):
            fn = paths[name]
            torch.cuda.synchronize()
            start = time.perf_counter()
            tokens = fn()
            torch.cuda.synchronize()
            results[name].append(tokens / (time.perf_counter() - start))
    return results


def _raw(engine, requests, params):
    def run() -> int:
        outputs = engine.generate(requests, params, use_tqdm=False)
        return sum(len(c.token_ids) for out in outputs for c in out.outputs)
    return run


def _ours(rollout, prompts, params):
    return lambda: int(rollout.generate(prompts, params)["response_mask"].sum())


def check_weight_sync(rollout: VLLMRollout, model_dir: str, prompts: Batch, count: int = 32) -> dict:
    """The engine starts from dummy weights; after `load_weights` of the HF model's weights its greedy
    tokens must follow HF generate on the same weights (bf16 both, so an occasional late divergence)."""
    from transformers import AutoModelForCausalLM

    from core.rollout.hf import HFRollout

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).cuda()
    hf = HFRollout(model, rollout.tokenizer)
    few = prompts.select(list(range(count)))
    greedy = SamplingParams(n=1, temperature=0.0, max_new_tokens=32)
    expected = hf.generate(few, greedy)

    def agreement() -> dict:
        got = rollout.generate(few, greedy)
        same_first = (got["responses"][:, 0] == expected["responses"][:, 0]).float().mean().item()
        first_diff = (got["rollout_log_probs"][:, 0] - expected["rollout_log_probs"][:, 0]).abs().mean().item()
        same_all = (got["responses"] == expected["responses"]).all(dim=1).float().mean().item()
        return {"first_token_match": same_first, "full_response_match": same_all, "first_logprob_abs_diff": first_diff}

    before = agreement()
    start = time.perf_counter()
    rollout.load_weights({k: v.detach().cpu() for k, v in model.state_dict().items()})
    seconds = time.perf_counter() - start
    return {"before_sync": before, "after_sync": agreement(), "sync_seconds": seconds}


def measure_sleep(rollout: VLLMRollout) -> dict[str, float]:
    """GPU memory in use (GiB, this process's view of the device) awake, asleep, and awake again."""
    def used() -> float:
        free, total = torch.cuda.mem_get_info()
        return (total - free) / 2**30

    awake = used()
    rollout.sleep()
    asleep = used()
    rollout.wake_up()
    return {"awake_gib": awake, "asleep_gib": asleep, "freed_gib": awake - asleep, "woken_gib": used()}


def write(report: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "rollout.json").write_text(json.dumps(report, indent=2) + "\n")
    lines = [f"# Rollout throughput: {report['model']} on {report['device']}", "",
             "Generated by `bench/perf/rollout_vllm_gpu.py`; do not edit by hand.", "",
             f"`{report['command']}` — vLLM {report['vllm']}, torch {report['torch']}, {report['weights']}, "
             f"{report['prompts']} prompts × {report['prompt_len']} tokens → {report['new_tokens']} new tokens, "
             f"{report['sampling']}. One engine; rounds alternate.", "",
             "| path | tokens/s (median) | all rounds, sorted |", "|---|---|---|"]
    for name, values in report["tokens_per_s"].items():
        lines.append(f"| {name} | {statistics.median(values):,.0f} | {', '.join(f'{v:,.0f}' for v in values)} |")
    sleep, sync = report["sleep"], report["weight_sync"]
    ratios = ", ".join(f"{label} **{ratio:.1%}**" for label, ratio in report["ours_over_raw"].items())
    lines += ["", f"Ours / raw, median rounds: {ratios} (target ≥ 95%).", "",
              f"Weight sync (dummy weights → the HF model's, {sync['sync_seconds']:.2f} s): greedy responses equal to "
              f"HF generate's {sync['before_sync']['full_response_match']:.0%} before the sync, "
              f"{sync['after_sync']['full_response_match']:.0%} after (first token "
              f"{sync['after_sync']['first_token_match']:.0%}, mean |Δ log-prob| of the first token "
              f"{sync['after_sync']['first_logprob_abs_diff']:.3g}).", "",
              f"`sleep()` (level 1): GPU memory in use {sleep['awake_gib']:.1f} GiB awake → {sleep['asleep_gib']:.1f} GiB "
              f"asleep (freed {sleep['freed_gib']:.1f} GiB) → {sleep['woken_gib']:.1f} GiB after `wake_up()`.", ""]
    (out / "README.md").write_text("\n".join(lines))
    print("\n".join(lines), flush=True)


if __name__ == "__main__":
    os.environ.setdefault("VLLM_USE_FLASHINFER_SAMPLER", "0")
    sys.exit(main())
