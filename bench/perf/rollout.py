"""Rollout tokens/s of one model config on one GPU: raw `vllm.LLM.generate`, our vLLM backend on the
same engine, and our HF backend; then the weight sync from the FSDP2 engine into vLLM in GB/s.

    python -m bench.perf.rollout --config-dir DIR --name qwen3-1.7b --out results/perf

Weights are random (vLLM `load_format=dummy`, a random-init HF model): throughput needs the shapes.
The engine runs as vLLM is normally run (CUDA graphs + torch.compile, `enforce_eager=False`) with the
backend's sampling settings (log-prob of each sampled token, after temperature). Rounds alternate
raw/ours on one engine, so drift hits both. Random weights rarely sample EOS, so every path
generates the full `--new-tokens` and the token counts are equal.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from bench.perf.rollout_vllm_gpu import _ours, _raw, _Tokenizer, measure_sleep, prompt_batch, timed_rounds
from core.engine.distributed import init_distributed
from core.engine.fsdp import FSDPEngine
from core.rollout.base import SamplingParams
from core.rollout.hf import HFRollout
from core.rollout.vllm import VLLMRollout, import_vllm


def _time_engine_calls(engine) -> list[float]:
    """Seconds of every `engine.generate` call, raw or from inside our backend: where ours is slower
    than raw, this says whether the engine or our own pre/post-processing took the time."""
    seconds, generate = [], engine.generate

    def timed_generate(*args, **kwargs):
        start = time.perf_counter()
        try:
            return generate(*args, **kwargs)
        finally:
            seconds.append(time.perf_counter() - start)

    engine.generate = timed_generate
    return seconds


def hf_tokens_per_s(config, prompts, params: SamplingParams, tokenizer) -> float:
    from transformers import AutoModelForCausalLM

    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).eval()
    rollout = HFRollout(model, tokenizer, micro_batch_size=64)  # HF keeps every step's logits: bounded batches
    rollout.generate(prompts.select(slice(0, 8)), params)  # warm-up
    torch.cuda.synchronize()
    start = time.perf_counter()
    tokens = int(rollout.generate(prompts, params)["response_mask"].sum())
    torch.cuda.synchronize()
    return tokens / (time.perf_counter() - start)


def weight_sync(config, rollout: VLLMRollout) -> dict:
    """FSDP2 engine (fp32 master weights) -> vLLM: the trainer's sync path, timed twice."""
    from transformers import AutoModelForCausalLM

    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    engine = FSDPEngine(model, init_distributed("cuda"), mixed_precision="bf16")  # joins the group main() made
    nbytes = sum(p.numel() * 2 for p in engine.model.parameters())  # bf16, as vLLM holds them
    rollout.wake_up()
    seconds = []
    for _ in range(2):
        torch.cuda.synchronize()
        start = time.perf_counter()
        rollout.load_weights(engine.iter_full_weights(torch.bfloat16, torch.device("cuda")))
        torch.cuda.synchronize()
        seconds.append(time.perf_counter() - start)
    return {"bytes": nbytes, "seconds": seconds, "gb_per_s": nbytes / min(seconds) / 1e9}


def add_rollout_shape_args(parser: argparse.ArgumentParser) -> None:
    """The model, batch and engine share every rollout benchmark is run at (this one and SGLang's)."""
    parser.add_argument("--config-dir", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--prompts", type=int, default=256)
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.45)
    parser.add_argument("--out", required=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_rollout_shape_args(parser)
    parser.add_argument("--skip-hf", action="store_true")
    args = parser.parse_args()
    from transformers import AutoConfig

    init_distributed("cuda")  # our NCCL group first, as in the trainer; vLLM then reuses it
    vllm = import_vllm()
    config = AutoConfig.from_pretrained(args.config_dir)
    started = time.perf_counter()
    engine = vllm.LLM(model=args.config_dir, load_format="dummy", skip_tokenizer_init=True, dtype="bfloat16",
                      gpu_memory_utilization=args.gpu_memory_utilization, enforce_eager=False, enable_sleep_mode=True,
                      max_model_len=args.prompt_len + args.new_tokens, seed=0, logprobs_mode="processed_logprobs")
    engine_start_s = time.perf_counter() - started
    eos = config.eos_token_id
    tokenizer = _Tokenizer(eos, config.pad_token_id if config.pad_token_id is not None else eos)
    ours = VLLMRollout.from_engine(engine, tokenizer, can_sleep=True)
    prompts = prompt_batch(args.prompts, args.prompt_len, config.vocab_size)
    params = SamplingParams(n=1, temperature=1.0, top_p=1.0, max_new_tokens=args.new_tokens, seed=None)
    raw_params = vllm.SamplingParams(n=1, temperature=1.0, top_p=1.0, max_tokens=args.new_tokens, logprobs=0,
                                     flat_logprobs=True, stop_token_ids=[eos])
    requests = [{"prompt_token_ids": row.tolist()} for row in prompts["input_ids"]]
    inner = _time_engine_calls(engine)
    paths = {"raw vllm.LLM.generate": _raw(engine, requests, raw_params),
             "recipezoo VLLMRollout": _ours(ours, prompts, params)}
    rounds = timed_rounds(paths, args.rounds)
    report = {"model": args.name, "device": torch.cuda.get_device_name(), "vllm": vllm.__version__,
              "torch": torch.__version__, "command": "python " + " ".join(sys.argv), "prompts": args.prompts,
              "prompt_len": args.prompt_len, "new_tokens": args.new_tokens, "engine_start_s": engine_start_s,
              "sampling": "temperature 1.0, top_p 1.0, unseeded, log-prob of each sampled token",
              "tokens_per_s": rounds, "engine_generate_s": inner, "sleep": measure_sleep(ours)}
    medians = {name: statistics.median(values) for name, values in rounds.items()}
    report["ours_over_raw"] = medians["recipezoo VLLMRollout"] / medians["raw vllm.LLM.generate"]
    print(json.dumps({"model": args.name, **medians, "ours_over_raw": report["ours_over_raw"]}), flush=True)
    ours.sleep()  # the HF model and the FSDP2 engine need the memory
    if not args.skip_hf:
        report["hf_tokens_per_s"] = hf_tokens_per_s(config, prompts, params, tokenizer)
        torch.cuda.empty_cache()
        print(json.dumps({"model": args.name, "hf_tokens_per_s": report["hf_tokens_per_s"]}), flush=True)
    report["weight_sync"] = weight_sync(config, ours)
    print(json.dumps({"model": args.name, "weight_sync": report["weight_sync"]}), flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"rollout_{args.name}.json").write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
