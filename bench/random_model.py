"""A random-init HF model dir from a config dir (config.json + tokenizer files): real architecture,
no download. Benchmarks of speed and memory need the shapes, not trained weights.

    python bench/random_model.py --config-dir DIR --out OUT   # tokenizer.json.xz is unpacked too
"""

from __future__ import annotations

import argparse
import lzma
import shutil
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM


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
    print(f"wrote {out}", flush=True)


if __name__ == "__main__":
    main()
