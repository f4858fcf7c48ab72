"""TRL's GRPOTrainer with vLLM colocated on one GPU, set to do the work of one of our GRPO steps, each step timed.

    python -m bench.perf.trl_grpo_gpu --model-dir DIR --data train.parquet --steps 5 --out results/trl_grpo_gpu

It runs beside bench/common/grpo_vllm_gpu.py in the same GPU session. One step: vLLM generates prompts-per-step x n
completions, our GSM8K scorer scores them, TRL recomputes their log-probs without grad (our old_log_prob stage),
and one AdamW step goes over all of them in micro-batches of 16. Writes OUT/trl_grpo.json after every step (a run
stopped from outside keeps its steps), each step with TRL's own engine/trainer gauge
`sampling/sampling_logp_difference/{mean,max}` (|Δ log p| of the sampled tokens, as our rollout/logprob_diff).
`--reward varied` scores with bench/common/varied_reward.py (non-zero advantages on random weights); `--liger on`
turns on TRL's Liger kernels (`use_liger_kernel`; needs the liger-kernel package, `auto`: where it imports).
--no-vllm makes TRL generate with HF `generate` (the CPU test path). Needs trl 1.16.0 (bench/requirements-gpu.txt).

Per-phase times come from TRL's own profiling contexts (perf_counter, no CUDA sync). They are recorded by
wrapping ProfilingContext._log_metrics, which only observes: with report_to=none TRL reports them nowhere.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

# The GPU machine has no network: no hub lookups or telemetry pings.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
# RANK/LOCAL_RANK/WORLD_SIZE are deliberately not set here. TRL's colocate init sets them (and MASTER_ADDR, plus a
# free MASTER_PORT) just before building vllm.LLM(distributed_executor_backend="external_launcher"). Setting
# LOCAL_RANK earlier would make accelerate start an NCCL group and wrap the model in a 1-rank DDP, which our
# trainer does not pay for.

import pandas as pd
import torch
import transformers
import trl
from datasets import Dataset
from transformers import AutoTokenizer, TrainerCallback
from trl import GRPOConfig, GRPOTrainer
from trl.extras import profiling

from bench.common.gpu_memory import PeakMemoryMonitor
from bench.common.varied_reward import compute_score as varied_score
from core.reward.gsm8k import compute_score

# TRL's per-step engine/trainer gauge, kept on each step's record.
LOGPROB_DIFF = ("sampling/sampling_logp_difference/mean", "sampling/sampling_logp_difference/max")


def gsm8k(completions, ground_truth, **_):
    """Our scorer on the decoded completion; TRL passes the dataset's extra columns as keyword lists."""
    texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
    return [compute_score(text, truth) for text, truth in zip(texts, ground_truth, strict=True)]


def varied(completions, ground_truth, **_):
    """bench/common/varied_reward.py on the decoded completion: rewards that vary within a group."""
    texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
    return [varied_score("gsm8k", text, truth) for text, truth in zip(texts, ground_truth, strict=True)]


def liger_on(choice: str) -> bool:
    """Whether TRL runs with Liger kernels: `on` needs liger-kernel (refused in one line without it)."""
    import importlib.util

    installed = importlib.util.find_spec("liger_kernel") is not None
    if choice == "on" and not installed:
        raise SystemExit("--liger on: liger-kernel is not installed here (pip install liger-kernel)")
    return choice != "off" and installed


def load_prompts(path: str, tokenizer, max_prompt_len: int) -> tuple[Dataset, int]:
    """verl-schema parquet -> conversational TRL dataset. TRL 1.16 has no max_prompt_length, so prompts over
    it are dropped here, as our loader's `truncation: filter` does."""
    rows, dropped = [], 0
    frame = pd.read_parquet(path, columns=["prompt", "reward_model"])
    for messages, reward_model in zip(frame["prompt"], frame["reward_model"], strict=True):
        messages = [{"role": m["role"], "content": m["content"]} for m in messages]
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        if len(tokenizer(text, add_special_tokens=False)["input_ids"]) > max_prompt_len:
            dropped += 1
            continue
        rows.append({"prompt": messages, "ground_truth": str(reward_model["ground_truth"])})
    return Dataset.from_list(rows), dropped


def breakdown(phases: dict, step_s: float) -> dict:
    """TRL's phase times as our timing_s/* stages. _prepare_inputs wraps the whole generation batch (weight sync,
    generate, reward, the no-grad log-prob forward, padding, advantages); the rest of the step is the micro-batch
    forward/backward passes, clipping and the optimizer step."""
    gen = phases.get("vLLM.generate", phases.get("transformers.generate", 0.0))
    sync, reward, prepare = (phases.get(k, 0.0) for k in ("sync_weights", "_calculate_rewards", "_prepare_inputs"))
    return {"gen": gen, "sync_weights": sync, "reward": reward, "old_log_prob_and_rest": prepare - gen - sync - reward,
            "update_actor": step_s - prepare}


class StepTimer(TrainerCallback):
    """Wall time and tokens of every optimizer step, TRL's phase times within it, and every logged dict."""

    def __init__(self, total_steps: int, completions_per_step: int, cuda: bool, on_step=None):
        self.total, self.completions, self.cuda, self.on_step = total_steps, completions_per_step, cuda, on_step
        self.steps: list[dict] = []
        self.logs: list[dict] = []
        self.phases: dict[str, float] = defaultdict(float)
        self._t0 = self._tokens0 = self._last_end = None

    def _now(self) -> float:
        if self.cuda:
            torch.cuda.synchronize()
        return time.perf_counter()

    def phase(self, name: str, seconds: float) -> None:
        self.phases[name.removeprefix("GRPOTrainer.")] += seconds

    def on_train_begin(self, args, state, control, **kwargs):
        self._last_end = self._now()

    def on_step_begin(self, args, state, control, **kwargs):
        # The Trainer has already fetched this step's batches (prompt dicts only): cheap, and in end_to_end_s.
        self.phases.clear()
        self._tokens0 = state.num_input_tokens_seen  # TRL adds prompt + completion tokens when it generates
        self._t0 = self._now()

    def on_step_end(self, args, state, control, **kwargs):
        end = self._now()
        step_s = end - self._t0
        record = {"step": state.global_step, "step_s": step_s, "end_to_end_s": end - self._last_end,
                  "tokens": int(state.num_input_tokens_seen - self._tokens0), "phases_s": dict(self.phases),
                  "breakdown_s": breakdown(self.phases, step_s)}
        self._last_end = end
        self.steps.append(record)
        eta = statistics.median(s["step_s"] for s in self.steps[1:] or self.steps) * (self.total - state.global_step)
        print(f"step {state.global_step}/{self.total} | {step_s:.2f} s | {record['tokens']:,} tok | "
              f"{record['tokens'] / step_s:,.0f} tok/s/GPU | gen {record['breakdown_s']['gen']:.2f} s | "
              f"update {record['breakdown_s']['update_actor']:.2f} s | ETA {eta:.0f} s", flush=True)

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = logs or {}
        self.logs.append({"step": state.global_step, **logs})
        if self.steps and self.steps[-1]["step"] == state.global_step:
            if "completions/mean_length" in logs:
                self.steps[-1]["response_tokens"] = round(logs["completions/mean_length"] * self.completions)
            self.steps[-1].update({key: logs[key] for key in LOGPROB_DIFF if key in logs})
            if self.on_step is not None:
                self.on_step()


def summarize(steps: list[dict], n_gpus: int) -> dict:
    """First step is warm-up (vLLM graph capture, allocator growth, first weight sync): left out when there are more."""
    kept = steps[1:] or steps

    def median(values) -> float:
        return statistics.median(list(values))

    return {
        "steps_summarized": [s["step"] for s in kept],
        "median_step_s": median(s["step_s"] for s in kept),
        "median_end_to_end_s": median(s["end_to_end_s"] for s in kept),
        "median_tokens_per_step": median(s["tokens"] for s in kept),
        # verl's perf/throughput: tokens (prompt + response) / (step time * GPUs), here over all kept steps.
        "tokens_per_s_per_gpu": sum(s["tokens"] for s in kept) / sum(s["step_s"] for s in kept) / n_gpus,
        "median_step_tokens_per_s_per_gpu": median(s["tokens"] / s["step_s"] / n_gpus for s in kept),
        "median_breakdown_s": {key: median(s["breakdown_s"][key] for s in kept) for key in kept[0]["breakdown_s"]},
        "median_phases_s": {name: median(s["phases_s"].get(name, 0.0) for s in kept)
                            for name in sorted({name for s in kept for name in s["phases_s"]})},
    }


def parse_args() -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--prompts-per-step", type=int, default=32)
    parser.add_argument("--n", type=int, default=8, help="generations per prompt")
    parser.add_argument("--micro-batch", type=int, default=16, help="completions per forward/backward")
    parser.add_argument("--max-prompt-len", type=int, default=384)
    parser.add_argument("--max-response-len", type=int, default=512)
    parser.add_argument("--lr", type=float, default=1e-6)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.5)
    parser.add_argument("--gradient-checkpointing", action="store_true")
    parser.add_argument("--reward", choices=("gsm8k", "varied"), default="gsm8k")
    parser.add_argument("--liger", choices=("auto", "on", "off"), default="off",
                        help="TRL's Liger kernels (use_liger_kernel); auto: where liger-kernel imports")
    parser.add_argument("--no-vllm", action="store_true", help="HF generate instead of vLLM (CPU test path)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    return parser, args


def grpo_config(args, out: Path, accumulation: int, cuda: bool, liger: bool = False) -> GRPOConfig:
    """TRL's settings for exactly our E2E step's work (the comments map each to ours)."""
    return GRPOConfig(
        output_dir=str(out / "hf_trainer"),
        max_steps=args.steps,
        # per_device_train_batch_size counts completions. Generation batch = steps_per_generation micro-batches =
        # all of the step's completions, and gradient_accumulation_steps equal to it gives one optimizer step per
        # generation; with num_iterations=1 each completion is trained on once (no PPO epochs).
        per_device_train_batch_size=args.micro_batch,
        gradient_accumulation_steps=accumulation,
        steps_per_generation=accumulation,
        num_generations=args.n, num_iterations=1,
        max_completion_length=args.max_response_len,
        temperature=1.0, top_p=1.0,
        beta=0.0,  # no KL term, so TRL loads no reference model
        epsilon=0.2,  # PPO clip, as our clip_ratio_low/high
        # "dapo": each micro-batch's loss is sum(token losses) / num_items_in_batch, the number of response tokens
        # in the whole generation batch (rescaled by GA/steps_per_generation = 1), and TRL marks the loss as already
        # scaled for accumulation. Summed over micro-batches: sum of token losses / response tokens in the batch,
        # our token-mean. ("bnpo" normalises per micro-batch; "grpo" per sequence.)
        loss_type="dapo",
        scale_rewards="group",  # GRPO advantage: (r - group mean) / group std
        learning_rate=args.lr, lr_scheduler_type="constant", warmup_steps=0,
        optim="adamw_torch",  # torch.optim.AdamW, betas (0.9, 0.999), eps 1e-8, as our FSDP engine
        weight_decay=0.0, max_grad_norm=1.0,
        # fp32 weights and AdamW state, bf16 autocast compute: our FSDP2 fp32-master / bf16-param policy on GPU.
        # On CPU both run fp32 (our mixed_precision=auto does the same).
        model_init_kwargs={"dtype": "float32"},
        bf16=cuda,
        gradient_checkpointing=args.gradient_checkpointing,  # TRL's default is True; ours is off
        use_liger_kernel=liger,
        use_vllm=not args.no_vllm, vllm_mode="colocate",
        vllm_gpu_memory_utilization=args.gpu_memory_utilization,
        vllm_max_model_length=args.max_prompt_len + args.max_response_len,
        # Frees vLLM's memory during training as our rollout.sleep() does, but at level 2: weights are dropped and
        # re-pushed from the training model at the next sync (ours: level 1, weights parked in host memory).
        vllm_enable_sleep_mode=cuda,
        # Left on (TRL's default): it is what makes TRL recompute the batch's log-probs without grad, the forward
        # our old_log_prob stage does. Its sequence mask zeroes some sequences' loss; the work is unchanged.
        vllm_importance_sampling_correction=True,
        shuffle_dataset=True, eval_strategy="no", save_strategy="no", logging_steps=1, report_to="none",
        disable_tqdm=True, seed=0,
    )


def main() -> int:
    parser, args = parse_args()

    completions = args.prompts_per_step * args.n
    if completions % args.micro_batch:
        parser.error(f"prompts-per-step x n = {completions} is not a multiple of --micro-batch {args.micro_batch}")
    accumulation = completions // args.micro_batch
    cuda = torch.cuda.is_available()
    liger = liger_on(args.liger)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    tokenizer = AutoTokenizer.from_pretrained(args.model_dir)
    dataset, dropped = load_prompts(args.data, tokenizer, args.max_prompt_len)
    if len(dataset) < args.prompts_per_step:
        parser.error(f"{len(dataset)} prompts fit --max-prompt-len; a step needs {args.prompts_per_step}")

    config = grpo_config(args, out, accumulation, cuda, liger)
    memory = PeakMemoryMonitor()  # nvidia-smi: vLLM's pool too, which torch's counters miss
    path = out / "trl_grpo.json"

    def report() -> dict:
        vllm = sys.modules.get("vllm")  # imported by TRL when installed
        return {
            "device": torch.cuda.get_device_name() if cuda else "cpu",
            "versions": {"torch": torch.__version__, "trl": trl.__version__,
                         "vllm": getattr(vllm, "__version__", None), "transformers": transformers.__version__},
            "command": sys.argv,
            "settings": {**vars(args), "liger_kernel": liger, "completions_per_step": completions,
                         "gradient_accumulation_steps": accumulation, "prompts_in_data": len(dataset),
                         "prompts_dropped_over_max_prompt_len": dropped},
            "grpo_config": config.to_dict(),
            "summary": summarize(timer.steps, n_gpus=1),
            "peak_memory_gib": memory.peaks_gib(),
            "steps": timer.steps,
            "logged": timer.logs,
        }

    def write() -> None:
        path.write_text(json.dumps(report(), indent=2, default=str) + "\n")

    timer = StepTimer(args.steps, completions, cuda, on_step=write)
    original_log_metrics = profiling.ProfilingContext._log_metrics

    def log_metrics(context, duration):
        timer.phase(context.name, duration)
        original_log_metrics(context, duration)

    profiling.ProfilingContext._log_metrics = log_metrics
    trainer = GRPOTrainer(model=args.model_dir, reward_funcs=varied if args.reward == "varied" else gsm8k,
                          args=config, train_dataset=dataset, processing_class=tokenizer, callbacks=[timer])
    with memory:
        trainer.train()
    write()
    summary = report()["summary"]
    print(f"median step {summary['median_step_s']:.2f} s | {summary['tokens_per_s_per_gpu']:,.0f} tok/s/GPU "
          f"(steps {summary['steps_summarized']}) | wrote {path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
