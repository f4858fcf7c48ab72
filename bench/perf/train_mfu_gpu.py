"""Policy-update tokens/s and MFU on one GPU: our FSDP2 engine vs a naive HF update, same RL batch.

    python -m bench.perf.train_mfu_gpu --config-dir DIR --name qwen3-1.7b --out results/perf/train [--steps 3]

The batch is RL-shaped: `--rows` sequences with prompt lengths uniform in [64, 256] and response
lengths uniform in [32, 1024], random tokens, random advantages; one optimizer step over all rows
(GRPO's clipped loss, token-mean), as in a GRPO update. Variants:
  naive  micro-batches of 16 padded rows, gradient checkpointing, full-vocab fp32 log-softmax
         (the issue's anchor: plain HF code);
  ours   padding removed (varlen flash attention), token-budget micro-batches, chunked log-prob head,
         bf16 compute over fp32 master weights (FSDP2), no activation checkpointing;
  ours_compiled  the same with each decoder block under torch.compile (actor.compile_layers);
  ours_ckpt, ours_compiled_ckpt  either with activation checkpointing (actor.gradient_checkpointing, as the
         run_qwen3_8b.sh scripts set it): the recomputed forward is not credited; _ckptN checkpoints only the
         first N decoder layers (actor.checkpoint_layers=N).
MFU counts the useful model FLOPs only (so padding and recomputation are not credited):
6·(decoder matmul params)·tokens + 6·n_layers·heads·head_dim·Σ s² (causal attention, fwd+bwd)
+ 6·V·D·(response tokens: the only positions whose logits are needed), over 989 TFLOP/s.
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import torch
from transformers import AutoConfig, AutoModelForCausalLM

from core.algos.actor_loss import make_actor_loss
from core.batch import Batch
from core.engine.distributed import init_distributed
from core.engine.fsdp import FSDPEngine, OptimConfig

OURS_VARIANT = r"(ours|ours_compiled)(_ckpt(\d*))?"  # ours, compiled or not, checkpointing all or the first N layers
PEAK_BF16 = 989e12  # H100/H200 SXM dense bf16, the reference
ACTOR = SimpleNamespace(policy_loss="ppo_clip", loss_agg_mode="token-mean", clip_ratio_low=0.2, clip_ratio_high=0.2,
                        clip_ratio_c=3.0, entropy_coeff=0.0, use_kl_loss=False, kl_cov_coef=0.0)


def rl_batch(rows: int, vocab: int, seed: int = 0) -> Batch:
    """Left-padded prompts + right-padded responses, ragged like a rollout."""
    gen = torch.Generator().manual_seed(seed)
    prompt_lens = torch.randint(64, 257, (rows,), generator=gen)
    response_lens = torch.randint(32, 1025, (rows,), generator=gen)
    width_p, width_r = int(prompt_lens.max()), int(response_lens.max())
    cols_p, cols_r = torch.arange(width_p), torch.arange(width_r)
    prompt_mask = (cols_p[None] >= width_p - prompt_lens[:, None]).long()
    response_mask = (cols_r[None] < response_lens[:, None]).long()
    responses = torch.randint(100, vocab - 100, (rows, width_r), generator=gen) * response_mask
    prompts = torch.randint(100, vocab - 100, (rows, width_p), generator=gen) * prompt_mask
    attention_mask = torch.cat([prompt_mask, response_mask], dim=1)
    return Batch({
        "prompts": prompts, "responses": responses, "input_ids": torch.cat([prompts, responses], dim=1),
        "attention_mask": attention_mask, "position_ids": (attention_mask.cumsum(1) - 1).clamp(min=0),
        "response_mask": response_mask,
        "advantages": torch.randn(rows, width_r, generator=gen) * response_mask,
    })


def useful_flops(config, model: torch.nn.Module, batch: Batch) -> float:
    layers = model.model.layers if hasattr(model, "model") else model.layers
    matmul_params = sum(m.weight.numel() for m in layers.modules() if isinstance(m, torch.nn.Linear))
    lengths = batch["attention_mask"].sum(1).double()
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    attention = 6 * config.num_hidden_layers * config.num_attention_heads * head_dim * float((lengths ** 2).sum())
    head = 6 * config.vocab_size * config.hidden_size * float(batch["response_mask"].sum())
    return 6 * matmul_params * float(lengths.sum()) + attention + head


def naive_update(model, optimizer, batch: Batch, micro_rows: int = 16) -> None:
    """Plain HF: padded micro-batches, full fp32 logits, log-softmax over the vocabulary."""
    width = batch["responses"].shape[1]
    num_tokens = batch["response_mask"].sum()
    for micro in batch.split(micro_rows):
        micro = micro.to("cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(input_ids=micro["input_ids"], attention_mask=micro["attention_mask"],
                           position_ids=micro["position_ids"], use_cache=False).logits
        log_probs = torch.log_softmax(logits[:, -width - 1:-1].float(), dim=-1)
        log_probs = log_probs.gather(-1, micro["responses"][..., None]).squeeze(-1)
        ratio = torch.exp(log_probs - log_probs.detach())
        loss = -(ratio * micro["advantages"] * micro["response_mask"]).sum() / num_tokens
        loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def timed(fn, steps: int) -> list[float]:
    times = []
    for _ in range(steps + 1):  # the first is warm-up (allocator, kernels' autotuning)
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return times[1:]


def run_variant(variant: str, args, config, batch: Batch, world) -> dict:
    """`variant` is naive, ours or ours_compiled (either + _ckpt or _ckptN), optionally @N: a token budget other
    than --micro-batch-tokens."""
    variant, _, budget = variant.partition("@")
    budget = int(budget) if budget else args.micro_batch_tokens
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(copy.deepcopy(config), dtype=torch.float32)
    flops = useful_flops(config, model, batch)
    forward = [None]
    if variant == "naive":
        model.gradient_checkpointing_enable()
        model.config.use_cache = False
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
        step = lambda: naive_update(model, optimizer, batch)  # noqa: E731
    else:
        base, ckpt, layers = re.fullmatch(OURS_VARIANT, variant).groups()
        engine = FSDPEngine(model, world, optim=OptimConfig(lr=1e-6), mixed_precision="bf16",
                            remove_padding=True, micro_batch_tokens=budget, compile_layers=base == "ours_compiled",
                            gradient_checkpointing=ckpt is not None, checkpoint_layers=int(layers) if layers else None)
        forward = timed(lambda: batch.tensors.__setitem__("old_log_probs", engine.compute_log_probs(batch)), 1)
        loss = make_actor_loss(ACTOR, max_response_length=batch["responses"].shape[1])
        step = lambda: engine.update(batch, loss, mini_batch_size=len(batch))  # noqa: E731
    torch.cuda.reset_peak_memory_stats()
    times = timed(step, args.steps)
    median = sorted(times)[len(times) // 2]
    tokens = float(batch["attention_mask"].sum())
    result = {"variant": variant, "micro_batch_tokens": budget if variant != "naive" else None, "step_s": times,
              "forward_s": forward[0], "median_step_s": median,
              "tokens_per_s": tokens / median,
              "mfu": flops / median / PEAK_BF16, "useful_tflops_per_step": flops / 1e12,
              "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30}
    return result


def packed_matches_padded(config, batch: Batch, world) -> float:
    """max |Δ log p| on CUDA between the packed and padded paths on the same bf16 weights."""
    small, log_probs = batch.select(slice(0, 8)), []
    for packed in (True, False):
        torch.manual_seed(0)
        with torch.device("cuda"):  # a config of its own: the packed engine switches its attention
            model = AutoModelForCausalLM.from_config(copy.deepcopy(config), dtype=torch.float32)
        engine = FSDPEngine(model, world, mixed_precision="bf16", remove_padding=packed)
        log_probs.append(engine.compute_log_probs(small))
        del engine, model
    return float((log_probs[0] - log_probs[1]).abs().max())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config-dir", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--micro-batch-tokens", type=int, default=16384, help="for variants without @N")
    parser.add_argument("--variants", default="ours@8192,ours@16384,naive")
    parser.add_argument("--num-layers", type=int, help="keep the config's widths, with this many decoder layers: "
                        "a large model's layers on one GPU (the embeddings and head stay whole)")
    args = parser.parse_args()
    bad = [v for v in args.variants.split(",") if not re.fullmatch(rf"(naive|{OURS_VARIANT})(@\d+)?", v)]
    if bad:
        parser.error(f"--variants: {', '.join(bad)}: expected naive, ours or ours_compiled, each with _ckpt or _ckptN "
                     "(the first N layers) and @TOKENS if wanted")
    config = AutoConfig.from_pretrained(args.config_dir)
    if args.num_layers is not None:
        if not 1 <= args.num_layers <= config.num_hidden_layers:
            parser.error(f"--num-layers {args.num_layers}: expected 1 to the config's {config.num_hidden_layers}")
        config.num_hidden_layers = args.num_layers
        if getattr(config, "layer_types", None):  # per-layer attention kinds, one per layer (transformers 5)
            config.layer_types = config.layer_types[:args.num_layers]
    world = init_distributed("cuda")
    batch = rl_batch(args.rows, config.vocab_size)
    report = {"model": args.name, "device": torch.cuda.get_device_name(), "command": " ".join(sys.argv),
              "torch": torch.__version__, "rows": args.rows, "tokens": int(batch["attention_mask"].sum()),
              "response_tokens": int(batch["response_mask"].sum()), "micro_batch_tokens": args.micro_batch_tokens,
              "padded_tokens": int(batch["attention_mask"].numel()), "peak_flops": PEAK_BF16,
              "packed_vs_padded_max_abs_logprob_diff": packed_matches_padded(config, batch, world), "variants": []}
    for variant in args.variants.split(","):
        try:
            result = run_variant(variant, args, config, batch, world)
            torch.cuda.empty_cache()
        except torch.OutOfMemoryError as error:
            result = {"variant": variant, "error": f"out of memory: {str(error).splitlines()[0]}"}
            torch.cuda.empty_cache()
        report["variants"].append(result)
        print(json.dumps({k: v for k, v in result.items() if k != "step_s"}), flush=True)
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        # after every variant: a sweep stopped by a time limit keeps the variants it measured
        (out / f"{args.name}.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
