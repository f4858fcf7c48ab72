"""SFT training speed on one GPU: recipezoo's SFT step beside TRL's SFTTrainer, same model, data and step size.

    python -m bench.perf.sft_speed --model-dir DIR --name qwen3-1.7b --out results/perf/sft [--steps 8]

One invocation runs both frameworks, each in a process of its own (a clean GPU, its own peak memory), one after
the other, on the same random-init weights (DIR, from bench/common/random_model.py) and the same rows: synthetic
prompt + completion token ids, lengths uniform in --prompt-len and --completion-len (GSM8K-like by default), the
loss on the completion tokens only. A step is one optimizer step over --rows-per-step examples:
  ours  FSDPEngine.update with the SFT loss (what `recipezoo sft` runs): padding removed, micro-batches of at
        most --micro-batch-tokens real tokens, chunked log-probs at the trained positions, bf16 compute over fp32
        master weights, decoder blocks compiled with --compile;
  trl   SFTTrainer with its own packing (best-fit decreasing, padding-free) into rows of max_length =
        --micro-batch-tokens, one packed row per micro-batch and as many accumulation steps as the packing of a
        step's examples takes (sft_settings: the same tokens per optimizer step), bf16, liger kernels when
        liger_kernel is installed, completion-only loss.
Both without activation checkpointing unless --gradient-checkpointing. --warmup steps are run first and not timed.
Each framework's json (<name>-<framework>.json) is rewritten after every step: tokens/s (real tokens, per GPU),
MFU (useful FLOPs, core/trainer/metrics.training_flops, the count `recipezoo sft` logs: 6·P·Σs + 6·L·A·Σs² +
6·V·D·trained tokens, identical for both on the same examples, over the GPU's dense bf16 peak), peak memory,
every step's time and the exact settings. bench/perf/sft_speed_report.py makes the table.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path

FRAMEWORKS = ("ours", "trl", "trl_varlen")
LR = 1e-6  # any small rate: speed only


def parse_range(text: str) -> tuple[int, int]:
    low, _, high = text.partition(":")
    if not (low.isdigit() and high.isdigit()) or not 0 < int(low) <= int(high):
        raise argparse.ArgumentTypeError(f"{text!r}: expected MIN:MAX token counts, 0 < MIN <= MAX")
    return int(low), int(high)


def synthetic_rows(count: int, vocab: int, prompt_len: tuple[int, int], completion_len: tuple[int, int],
                   seed: int = 0) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, completion ids) pairs of random tokens, lengths uniform in the ranges (inclusive)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    low, high = min(100, vocab // 4), vocab - min(100, vocab // 4)  # clear of the special tokens at either end
    rows = []
    for _ in range(count):
        p = int(torch.randint(prompt_len[0], prompt_len[1] + 1, (), generator=gen))
        c = int(torch.randint(completion_len[0], completion_len[1] + 1, (), generator=gen))
        rows.append((torch.randint(low, high, (p,), generator=gen).tolist(),
                     torch.randint(low, high, (c,), generator=gen).tolist()))
    return rows


def packed_rows(rows, seq_length: int) -> int:
    """How many rows TRL's own packing (trl.data_utils.pack_dataset, best-fit decreasing) makes of `rows`."""
    from trl.data_utils import pack_dataset

    return len(pack_dataset(trl_dataset(rows), seq_length, strategy="bfd"))


def trl_dataset(rows):
    from datasets import Dataset

    return Dataset.from_dict({"input_ids": [p + c for p, c in rows],
                              "completion_mask": [[0] * len(p) + [1] * len(c) for p, c in rows]})


def sft_settings(args, rows) -> dict:
    """The work both frameworks do: each step's examples and tokens, the micro-batch size, and TRL's accumulation
    steps: TRL packs the whole dataset at once, so a step takes its share of the packed rows (their count from
    TRL's own packing over the number of steps, to the nearest whole row), about the tokens of one of our steps."""
    longest = max(len(p) + len(c) for p, c in rows)
    if longest > args.micro_batch_tokens:
        raise SystemExit(f"--micro-batch-tokens {args.micro_batch_tokens}: below the longest example ({longest} "
                         "tokens); TRL's packing would cut it")
    per_step = [rows[i:i + args.rows_per_step] for i in range(0, len(rows), args.rows_per_step)]
    packed, total = packed_rows(rows, args.micro_batch_tokens), sum(len(p) + len(c) for p, c in rows)
    accumulation = max(1, round(packed / len(per_step)))
    return {"rows_per_step": args.rows_per_step, "steps": args.steps, "warmup": args.warmup,
            "tokens_per_step": [sum(len(p) + len(c) for p, c in step) for step in per_step],
            "trained_tokens_per_step": [sum(len(c) for _, c in step) for step in per_step],
            "micro_batch_tokens": args.micro_batch_tokens, "trl_packed_rows": packed,
            "trl_gradient_accumulation_steps": accumulation, "trl_tokens_per_step": total / packed * accumulation,
            "prompt_len": list(args.prompt_len), "completion_len": list(args.completion_len),
            "gradient_checkpointing": args.gradient_checkpointing, "compile": args.compile, "lr": LR}


def trl_config_kwargs(settings: dict, out: str, liger: bool) -> dict:
    """SFTConfig's fields for the same work: one packed row of micro_batch_tokens per micro-batch, a step's
    examples per optimizer step, no shuffling (the steps take the rows in order, as ours)."""
    return {"output_dir": out, "packing": True, "packing_strategy": "bfd", "padding_free": True,
            "max_length": settings["micro_batch_tokens"], "per_device_train_batch_size": 1,
            "gradient_accumulation_steps": settings["trl_gradient_accumulation_steps"],
            "max_steps": settings["warmup"] + settings["steps"], "bf16": True, "use_liger_kernel": liger,
            "gradient_checkpointing": settings["gradient_checkpointing"], "completion_only_loss": True,
            "learning_rate": settings["lr"], "lr_scheduler_type": "constant", "warmup_steps": 0, "weight_decay": 0.0,
            "logging_steps": 1, "report_to": "none", "save_strategy": "no", "shuffle_dataset": False,
            "dataloader_drop_last": False, "seed": 0}


def step_flops(shape, lengths: list[int], trained: int) -> float:
    import torch

    from core.trainer.metrics import training_flops

    return training_flops(shape, torch.tensor(lengths), trained)


def on_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def synchronize() -> None:
    """Wait for the GPU's queued work, so that a step's time is its own (nothing to wait for on a CPU)."""
    import torch

    if on_gpu():
        torch.cuda.synchronize()


def reset_peak_memory() -> None:
    import torch

    if on_gpu():
        torch.cuda.reset_peak_memory_stats()


def peak_memory_gib() -> float | None:
    import torch

    return torch.cuda.max_memory_allocated() / 2**30 if on_gpu() else None


def write_result(path: Path, result: dict) -> None:
    """Rewritten after every step: a run stopped by a time limit keeps what it measured."""
    step_s = result["step_s"][result["settings"]["warmup"]:]
    timed = result["tokens"][result["settings"]["warmup"]:len(result["step_s"])]
    flops = result["flops"][result["settings"]["warmup"]:len(result["step_s"])]
    if step_s:
        result["tokens_per_s"] = sum(timed) / sum(step_s)
        result["mfu"] = sum(flops) / sum(step_s) / result["peak_flops"] if result["peak_flops"] else None
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1))


def base_result(framework: str, args, settings: dict) -> dict:
    import torch
    import transformers

    from core.trainer.metrics import peak_flops

    device = torch.device("cuda" if on_gpu() else "cpu")
    return {"framework": framework, "model": args.name, "model_dir": args.model_dir, "random_init": True,
            "device": torch.cuda.get_device_name(device) if on_gpu() else "CPU", "peak_flops": peak_flops(device),
            "settings": settings,
            "torch": torch.__version__, "transformers": transformers.__version__, "command": " ".join(sys.argv),
            "step_s": [], "tokens": [], "flops": [], "tokens_per_s": None, "mfu": None, "peak_memory_gib": None}


def run_ours(args, rows, settings: dict, path: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    from core.algos.sft_loss import make_sft_loss
    from core.data.sft_dataset import SFTItem, collate_sft
    from core.engine.distributed import init_distributed
    from core.engine.fsdp import FSDPEngine, OptimConfig
    from core.trainer.metrics import FlopsShape

    world = init_distributed("auto")
    with torch.device(world.device):
        model = AutoModelForCausalLM.from_pretrained(args.model_dir, dtype=torch.float32)
    engine = FSDPEngine(model, world, optim=OptimConfig(lr=LR, weight_decay=0.0),
                        mixed_precision="bf16" if on_gpu() else "auto",  # a CPU trains in fp32
                        remove_padding=True, micro_batch_tokens=args.micro_batch_tokens, compile_layers=args.compile,
                        gradient_checkpointing=args.gradient_checkpointing)
    shape, loss = FlopsShape.of(engine.model), make_sft_loss("token-mean", args.completion_len[1])
    result = base_result("ours", args, settings)
    reset_peak_memory()
    for start in range(0, len(rows), args.rows_per_step):
        step = rows[start:start + args.rows_per_step]
        synchronize()
        began = time.perf_counter()
        batch = collate_sft([SFTItem(p, c, [1] * len(c)) for p, c in step], pad_token_id=0)
        engine.update(batch, loss, mini_batch_size=len(batch))
        synchronize()
        result["step_s"].append(time.perf_counter() - began)
        result["tokens"].append(sum(len(p) + len(c) for p, c in step))
        result["flops"].append(step_flops(shape, [len(p) + len(c) for p, c in step], sum(len(c) for _, c in step)))
        result["peak_memory_gib"] = peak_memory_gib()
        write_result(path, result)


def segment_lengths(position_ids) -> list[int]:
    """A padding-free row's example lengths: each starts where its positions restart at 0."""
    flat = position_ids.flatten().tolist()
    starts = [i for i, position in enumerate(flat) if position == 0] + [len(flat)]
    return [b - a for a, b in zip(starts, starts[1:]) if b > a]


def flash_kwargs(lengths: list[int]) -> dict:
    """A packed row's sequence bounds, as transformers' flash-attention kwargs (what our packed attention reads)."""
    import torch

    bounds = torch.tensor([0, *lengths], dtype=torch.int32).cumsum(0, dtype=torch.int32)
    longest = max(lengths)
    return {"cu_seq_lens_q": bounds, "cu_seq_lens_k": bounds, "max_length_q": longest, "max_length_k": longest}


def trl_attention(args, framework: str) -> str:
    import importlib.util

    if framework == "trl_varlen":
        from core.engine.packing import register_varlen_attention

        return register_varlen_attention()
    if args.trl_attention == "auto":
        return "flash_attention_2" if importlib.util.find_spec("flash_attn") else "sdpa"
    return args.trl_attention


def run_trl(args, rows, settings: dict, path: Path, framework: str = "trl") -> None:
    import importlib.util

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import SFTConfig, SFTTrainer

    from core.trainer.metrics import FlopsShape

    liger = importlib.util.find_spec("liger_kernel") is not None
    attention = trl_attention(args, framework)
    model = AutoModelForCausalLM.from_pretrained(args.model_dir, dtype=torch.float32,
                                                 attn_implementation=attention).to("cuda" if on_gpu() else "cpu")
    shape = FlopsShape.of(model)
    result = base_result(framework, args, settings)
    config = trl_config_kwargs(settings, str(path.parent / f"trl-{args.name}"), liger)
    if not on_gpu():  # TrainingArguments refuses bf16 without a GPU: a CPU run (the plumbing's test) is fp32
        config.update(bf16=False, use_cpu=True)
    result.update(trl_settings=config, trl_attention=attention, liger_kernel=liger)
    micro = []  # (tokens, example lengths, trained tokens) per micro-batch, in the order the steps take them

    class StepTimer(TrainerCallback):
        def on_train_begin(self, *_, **__):
            reset_peak_memory()
            synchronize()
            self.last = time.perf_counter()

        def on_step_end(self, *_, **__):
            synchronize()
            now, done = time.perf_counter(), len(result["step_s"])
            result["step_s"].append(now - self.last)
            self.last = now
            share = micro[done * config["gradient_accumulation_steps"]:(done + 1) * config["gradient_accumulation_steps"]]
            result["tokens"].append(sum(m[0] for m in share))
            result["flops"].append(step_flops(shape, [n for m in share for n in m[1]], sum(m[2] for m in share)))
            result["peak_memory_gib"] = peak_memory_gib()
            write_result(path, result)

    trainer = SFTTrainer(model=model, args=SFTConfig(**config), train_dataset=trl_dataset(rows),
                         processing_class=AutoTokenizer.from_pretrained(args.model_dir), callbacks=[StepTimer()])
    collate = trainer.data_collator

    def counted(examples):
        batch = collate(examples)
        lengths = segment_lengths(batch["position_ids"])
        micro.append((sum(lengths), lengths, int((batch["labels"] != -100).sum())))
        return {**batch, **flash_kwargs(lengths)} if framework == "trl_varlen" else batch

    trainer.data_collator = counted
    trainer.train()


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", required=True, help="a random-init model dir (bench/common/random_model.py)")
    parser.add_argument("--name", required=True, help="its name in the json and table, e.g. qwen3-1.7b")
    parser.add_argument("--out", required=True)
    parser.add_argument("--framework", choices=FRAMEWORKS, help="one framework (the parent runs each so)")
    parser.add_argument("--frameworks", default=",".join(FRAMEWORKS), help="the frameworks the parent runs, in order")
    parser.add_argument("--rows-per-step", type=int, default=256, help="examples per optimizer step")
    parser.add_argument("--steps", type=int, default=8, help="timed steps")
    parser.add_argument("--warmup", type=int, default=3, help="steps run first, not timed")
    parser.add_argument("--micro-batch-tokens", type=int, default=16384, help="ours: actor.micro_batch_tokens; "
                        "TRL: max_length of its packed rows")
    parser.add_argument("--prompt-len", type=parse_range, default=(64, 256))
    parser.add_argument("--completion-len", type=parse_range, default=(64, 512))
    parser.add_argument("--vocab", type=int, default=None, help="token ids below this (default: the model's)")
    parser.add_argument("--compile", action="store_true", help="ours: decoder blocks under torch.compile")
    parser.add_argument("--gradient-checkpointing", action="store_true", help="both: activation checkpointing")
    parser.add_argument("--trl-attention", default="auto", help="TRL's attn_implementation (auto: flash_attention_2 "
                        "when flash_attn is installed, else sdpa, which transformers masks per packed example)")
    args = parser.parse_args(argv)
    unknown = [name for name in args.frameworks.split(",") if name not in FRAMEWORKS]
    if unknown:
        parser.error(f"--frameworks {args.frameworks}: {', '.join(unknown)} not one of {', '.join(FRAMEWORKS)}")
    for name in ("rows_per_step", "steps", "micro_batch_tokens"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} {getattr(args, name)}: expected at least 1")
    if args.warmup < 0:
        parser.error(f"--warmup {args.warmup}: expected 0 or more")
    return args


def rows_for(args) -> list:
    from transformers import AutoConfig

    vocab = args.vocab or AutoConfig.from_pretrained(args.model_dir).vocab_size
    return synthetic_rows((args.warmup + args.steps) * args.rows_per_step, vocab, args.prompt_len, args.completion_len)


def main(argv=None) -> int:
    args = parse_args(argv)
    rows = rows_for(args)
    settings = sft_settings(args, rows)
    out = Path(args.out)
    if args.framework:
        path = out / f"{args.name}-{args.framework}.json"
        if args.framework == "ours":
            run_ours(args, rows, settings, path)
        else:
            run_trl(args, rows, settings, path, args.framework)
        return 0
    failed = []
    for framework in args.frameworks.split(","):  # the same invocation, one process each
        command = [sys.executable, "-m", "bench.perf.sft_speed", *(sys.argv[1:] if argv is None else argv),
                   "--framework", framework]
        print(f"[sft_speed] {framework}: {' '.join(command[2:])}", flush=True)
        if subprocess.call(command) != 0:
            failed.append(framework)
    mean_tokens = math.fsum(settings["tokens_per_step"]) / len(settings["tokens_per_step"])
    print(f"[sft_speed] {mean_tokens:.0f} tokens per step; TRL: {settings['trl_gradient_accumulation_steps']} "
          f"accumulation steps of one packed row of {settings['micro_batch_tokens']} tokens", flush=True)
    if failed:
        print(f"[sft_speed] failed: {' '.join(failed)} (its log is above)", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
