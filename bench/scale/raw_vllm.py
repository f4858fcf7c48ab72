"""Raw `vllm.LLM.generate` tokens/s on one GPU at a recipe's per-GPU batch and lengths: the reference
bench/scale/suite.py holds its own rollout against.

    python -m bench.scale.raw_vllm --model DIR --recipe dapo --prompts 8 --n 16 --max-prompt-length 512 \
        --max-response-length 2048 --data DIR --out raw.json

The prompts are the first GSM8K train prompts tokenized as the trainer tokenizes them; n and the
lengths are those of the config `recipes/<recipe>/run_qwen3_8b.sh` resolves (bench/scale/suite.py passes
them from its dry run), the engine settings as that script's (dummy weights, CUDA graphs, temperature 1,
the sampled token's log-prob returned, as ours asks).
The first round includes warm-up and is dropped; the median of the rest is reported.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from core.data.dataset import PromptDataset
from core.models.loading import load_tokenizer
from core.rollout.vllm import import_vllm


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--recipe", required=True)
    parser.add_argument("--prompts", type=int, required=True, help="prompts per GPU per step")
    parser.add_argument("--n", type=int, required=True, help="rollout.n: samples per prompt")
    parser.add_argument("--max-prompt-length", type=int, required=True, help="data.max_prompt_length")
    parser.add_argument("--max-response-length", type=int, required=True, help="data.max_response_length")
    parser.add_argument("--data", required=True, help="dir with GSM8K train.parquet")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.35)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    n, prompt_len, response_len = args.n, args.max_prompt_length, args.max_response_length
    tokenizer = load_tokenizer(args.model)
    dataset = PromptDataset([str(Path(args.data) / "train.parquet")], tokenizer, max_prompt_length=prompt_len)
    prompts = [{"prompt_token_ids": list(dataset.items[i].prompt_ids)} for i in range(args.prompts)]
    vllm = import_vllm()
    llm = vllm.LLM(model=args.model, load_format="dummy", skip_tokenizer_init=True, dtype="bfloat16", seed=0,
                   gpu_memory_utilization=args.gpu_memory_utilization, max_model_len=prompt_len + response_len,
                   enforce_eager=False, logprobs_mode="processed_logprobs")
    params = vllm.SamplingParams(n=n, temperature=1.0, max_tokens=response_len, logprobs=0, flat_logprobs=True, seed=0)
    rates = []
    for _ in range(args.rounds):
        start = time.perf_counter()
        outputs = llm.generate(prompts, params, use_tqdm=False)
        seconds = time.perf_counter() - start
        rates.append(sum(len(c.token_ids) for o in outputs for c in o.outputs) / seconds)
    result = {"recipe": args.recipe, "prompts": args.prompts, "n": n, "max_tokens": response_len,
              "tokens_per_s": statistics.median(rates[1:] or rates), "rounds_tokens_per_s": rates}
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"[scale] raw vLLM {args.recipe}: {result['tokens_per_s']:.0f} tokens/s on one GPU", flush=True)


if __name__ == "__main__":
    main()
