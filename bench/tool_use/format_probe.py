"""Which tool-call and answer formats a model already writes, before any training: sample prompts with the
Python tool offered in the chat template (`rollout.multi_turn.format=chat`) and with the tag instruction
(`format=tags`, python_tool.py's TAGS_INSTRUCTION), and count the samples whose text holds a call that format
parses, and the share whose answer is in `\\boxed{}` (what reward.gsm8k_method=math_verify reads first) or after
`####` (what strict reads).

    python -m bench.tool_use.format_probe --model DIR --data gsm8k/test.parquet [--prompts 8] [--max-tokens 160]
        [--tags-data FILE] [--json OUT]

--tags-data: the tag format's prompts as another file writes them (a task whose tag prompts differ from its chat
ones: `recipezoo leaderboard run --suite tool-arithmetic` probes its own two files) instead of each --data
question with TAGS_INSTRUCTION after it. --json: the counts as a file, and the format to train with (`chosen`:
the one with more well-formed calls; chat on a tie, the format of the model's own chat template).

A format the model never writes gives RL nothing to reinforce: pick the one it already writes sometimes, and a
reward that reads the answer format it writes.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from core.data.rows import read_rows
from core.models.loading import resolve_model_path
from core.reward.answer_formats import format_shares
from core.rollout.multi_turn.actions import parse_calls
from core.rollout.multi_turn.python_tool import TAGS_INSTRUCTION, python
from core.rollout.multi_turn.tools import tool_schema

FORMATS = ("chat", "tags")  # a tie goes to the first


def sample(model, tokenizer, conversations: list[list[dict]], template_kwargs: dict, max_tokens: int) -> list[str]:
    texts = [tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **template_kwargs)
             for messages in conversations]
    tokenizer.padding_side = "left"
    encoded = tokenizer(texts, return_tensors="pt", padding=True).to(model.device)
    with torch.no_grad():
        out = model.generate(**encoded, max_new_tokens=max_tokens, do_sample=True, temperature=1.0,
                             pad_token_id=tokenizer.pad_token_id)
    return [tokenizer.decode(row[encoded.input_ids.shape[1]:], skip_special_tokens=True) for row in out]


def probe_conversations(data: str, tags_data: str | None, prompts: int) -> dict[str, tuple[list, dict]]:
    """format -> (conversations, chat-template arguments) to sample from."""
    rows = read_rows(data)[:prompts]
    # GSM8K rows keep the bare question; rows without one (tool-arithmetic) give their whole prompt.
    questions = [row["extra_info"].get("question") or row["prompt"][-1]["content"] for row in rows]
    tags = ([row["prompt"] for row in read_rows(tags_data)[:prompts]] if tags_data else
            [[{"role": "user", "content": f"{question} {TAGS_INSTRUCTION}"}] for question in questions])
    return {"chat": ([[{"role": "user", "content": question}] for question in questions],
                     {"tools": [tool_schema(python, "probe")]}),
            "tags": (tags, {})}


def probe_formats(model_path: str, data: str, tags_data: str | None = None, prompts: int = 8,
                  max_tokens: int = 160, seed: int = 0) -> dict:
    """{format: {samples, calls (samples holding a well-formed python call), boxed, hashes (answer shares)}}
    and `chosen`, the format with the most calls."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = resolve_model_path(model_path)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(
        path, torch_dtype=torch.bfloat16 if device == "cuda" else torch.float32).to(device)
    found = {}
    for action_format, (conversations, template_kwargs) in probe_conversations(data, tags_data, prompts).items():
        torch.manual_seed(seed)
        texts = sample(model, tokenizer, conversations, template_kwargs, max_tokens)
        calls = sum(any(call.error is None for call in parse_calls(text, action_format, ["python"])) for text in texts)
        shares = format_shares(texts)
        found[action_format] = {"samples": len(texts), "calls": calls, "boxed": shares["\\boxed{}"],
                                "hashes": shares["####"]}
    chosen = max(FORMATS, key=lambda name: (found[name]["calls"], -FORMATS.index(name)))
    return {"model": model_path, "data": data, "tags_data": tags_data, "max_tokens": max_tokens, "seed": seed,
            "formats": found, "chosen": chosen}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="HF id, dir or pypi:// name")
    parser.add_argument("--data", required=True, help="verl-schema parquet (recipezoo data gsm8k or tool-arithmetic)")
    parser.add_argument("--tags-data", default=None, help="the tag format's prompts, as written in this file")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=160)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None, help="write the counts and the chosen format here")
    args = parser.parse_args()
    for flag, path in (("--data", args.data), ("--tags-data", args.tags_data)):
        if path and not Path(path).is_file():
            parser.error(f"{flag} {path}: no such file")
    report = probe_formats(args.model, args.data, args.tags_data, args.prompts, args.max_tokens, args.seed)
    for action_format, counts in report["formats"].items():
        print(f"format={action_format}: {counts['calls']} of {counts['samples']} samples hold a well-formed python "
              f"call; answers: {counts['boxed']:.0%} in \\boxed{{}}, {counts['hashes']:.0%} after ####", flush=True)
    print(f"chosen: {report['chosen']}", flush=True)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
