"""A random-init HF model dir from a config dir (config.json + tokenizer files): real architecture,
no download. Benchmarks of speed and memory need the shapes, not trained weights.

    python -m bench.common.random_model --config-dir bench/configs/qwen3-0.6b --out /tmp/qwen3-0.6b-random

The Qwen3 sizes share one tokenizer, shipped once as bench/configs/qwen3-tokenizer.json.xz beside their
config dirs; it becomes the model dir's tokenizer.json unless the config dir has its own.
"""

from __future__ import annotations

import argparse
import lzma
import shutil
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM

SHARED_TOKENIZER = "qwen3-tokenizer.json.xz"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config-dir", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    source, out = Path(args.config_dir), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(source), dtype=torch.bfloat16)
    model.save_pretrained(out)
    for item in source.iterdir():
        if item.name.endswith(".xz"):
            (out / item.name[:-3]).write_bytes(lzma.decompress(item.read_bytes()))
        elif item.name.startswith("tokenizer") or item.name in ("vocab.json", "merges.txt"):
            shutil.copy2(item, out / item.name)
    shared = source.parent / SHARED_TOKENIZER
    if not (out / "tokenizer.json").exists() and shared.is_file():
        (out / "tokenizer.json").write_bytes(lzma.decompress(shared.read_bytes()))
    print(f"wrote {out}", flush=True)


if __name__ == "__main__":
    main()
