"""Rollout tokens/s of one engine on one GPU, raw against our backend on the same engine; then what sleep frees
and the FSDP2 -> engine weight sync in GB/s. One process per (backend, model): SGLang and vLLM live in separate
Python environments (bench/requirements-sglang.txt, bench/requirements-gpu.txt), so bench/perf/sglang_suite.sh runs
each backend with its own interpreter and bench/perf/report.py puts the four paths side by side.

    python -m bench.perf.sglang_rollout --backend sglang --config-dir bench/configs/qwen3-1.7b --name qwen3-1.7b --out DIR

Both backends get the same prompts (random token ids), lengths and sampling (temperature 1.0, top_p 1.0, the
log-prob of each sampled token) and build their engine through our backend's constructor (`model.init=random`
weights, CUDA graphs on, sleep enabled), so raw and ours run on one engine, as the trainer builds it. Random
weights rarely sample EOS, so every path generates the full `--new-tokens`. Rounds alternate raw/ours.
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
from omegaconf import OmegaConf

from bench.perf.rollout import _time_engine_calls, add_rollout_shape_args, weight_sync
from bench.perf.rollout_vllm_gpu import _ours, _raw, _Tokenizer, prompt_batch, timed_rounds
from core.engine.distributed import init_distributed
from core.rollout.base import SamplingParams

RAW = {"sglang": "raw sglang.Engine.generate", "vllm": "raw vllm.LLM.generate"}
OURS = {"sglang": "recipezoo SGLangRollout", "vllm": "recipezoo VLLMRollout"}


def build(backend: str, config_dir: str, tokenizer, args):
    """Our backend over a fresh engine, the engine's version, and the engine (whose generate is the raw path)."""
    cfg = OmegaConf.create({"tensor_model_parallel_size": 1, "gpu_memory_utilization": args.gpu_memory_utilization,
                            "enforce_eager": False, "free_cache_engine": True})
    common = dict(dtype="bfloat16", seed=0, max_model_len=args.prompt_len + args.new_tokens, dummy_weights=True)
    if backend == "sglang":
        import sglang

        from core.rollout.sglang import SGLangRollout

        rollout = SGLangRollout(config_dir, tokenizer, cfg, **common)
        return rollout, sglang.__version__, rollout.engine
    from core.rollout.vllm import VLLMRollout, import_vllm

    vllm = import_vllm()  # sets the engine's environment before vllm is imported
    rollout = VLLMRollout(config_dir, tokenizer, cfg, **common)
    return rollout, vllm.__version__, rollout.llm


def raw_path(backend: str, engine, prompts, new_tokens: int, eos: int):
    ids = [row.tolist() for row in prompts["input_ids"]]
    if backend == "sglang":  # the sampling dict our backend sends, written out
        sampling = {"max_new_tokens": new_tokens, "stop_token_ids": [eos], "temperature": 1.0, "top_p": 1.0, "top_k": -1}
        return lambda: sum(len(out["output_ids"]) for out in
                           engine.generate(input_ids=ids, sampling_params=sampling, return_logprob=True))
    from core.rollout.vllm import import_vllm

    params = import_vllm().SamplingParams(n=1, temperature=1.0, top_p=1.0, max_tokens=new_tokens, logprobs=0,
                                 flat_logprobs=True, stop_token_ids=[eos])
    return _raw(engine, [{"prompt_token_ids": row} for row in ids], params)


def timed_sleep(rollout) -> dict[str, float]:
    """GPU memory in use (GiB, the whole device: SGLang's engine is another process) awake, asleep and awake
    again, and the seconds sleep and wake-up took."""
    def used() -> float:
        free, total = torch.cuda.mem_get_info()
        return (total - free) / 2**30

    awake, start = used(), time.perf_counter()
    rollout.sleep()
    asleep, slept = used(), time.perf_counter()
    rollout.wake_up()
    return {"awake_gib": awake, "asleep_gib": asleep, "freed_gib": awake - asleep, "woken_gib": used(),
            "sleep_s": slept - start, "wake_s": time.perf_counter() - slept}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=sorted(RAW), required=True)
    add_rollout_shape_args(parser)
    parser.add_argument("--torch-threads", type=int, default=None, help="torch's intra-op threads in this process "
                        "(default: torch's own); our backend's host work is small tensor ops, slow on a busy host")
    args = parser.parse_args()
    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    from transformers import AutoConfig

    init_distributed("cuda")  # our NCCL group first, as in the trainer
    config = AutoConfig.from_pretrained(args.config_dir)
    eos = config.eos_token_id
    tokenizer = _Tokenizer(eos, config.pad_token_id if config.pad_token_id is not None else eos)
    started = time.perf_counter()
    rollout, version, engine = build(args.backend, args.config_dir, tokenizer, args)
    engine_start_s = time.perf_counter() - started
    prompts = prompt_batch(args.prompts, args.prompt_len, config.vocab_size)
    params = SamplingParams(n=1, temperature=1.0, top_p=1.0, max_new_tokens=args.new_tokens, seed=None)
    inner = _time_engine_calls(engine)
    raw, ours = RAW[args.backend], OURS[args.backend]
    load_before = os.getloadavg()[0]  # other work on the host slows the host-side part of every path
    rounds = timed_rounds({raw: raw_path(args.backend, engine, prompts, args.new_tokens, eos),
                           ours: _ours(rollout, prompts, params)}, args.rounds)
    medians = {name: statistics.median(values) for name, values in rounds.items()}
    report = {"backend": args.backend, "model": args.name, "device": torch.cuda.get_device_name(),
              "engine_version": version, "torch": torch.__version__, "command": "python " + " ".join(sys.argv),
              "prompts": args.prompts, "prompt_len": args.prompt_len, "new_tokens": args.new_tokens,
              "engine_start_s": engine_start_s, "gpu_memory_utilization": args.gpu_memory_utilization,
              "sampling": "temperature 1.0, top_p 1.0, unseeded, log-prob of each sampled token",
              "tokens_per_s": rounds, "engine_generate_s": inner, "ours_over_raw": medians[ours] / medians[raw],
              "host": {"cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                       "load_1min_before": load_before, "load_1min_after": os.getloadavg()[0]}}
    print(json.dumps({"backend": args.backend, "model": args.name, **medians, "ours_over_raw": report["ours_over_raw"]}),
          flush=True)
    report["sleep"] = timed_sleep(rollout)
    print(json.dumps({"model": args.name, "sleep": report["sleep"]}), flush=True)
    rollout.sleep()  # the FSDP2 engine's fp32 weights need the memory; the sync wakes the engine again
    report["weight_sync"] = weight_sync(config, rollout)
    print(json.dumps({"model": args.name, "weight_sync": report["weight_sync"]}), flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"sglang_rollout_{args.backend}_{args.name}.json").write_text(json.dumps(report, indent=1) + "\n")
    if args.backend == "sglang":
        engine.shutdown()  # its scheduler and detokenizer processes
    return 0


if __name__ == "__main__":
    sys.exit(main())
