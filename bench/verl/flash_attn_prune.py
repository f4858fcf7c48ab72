"""Cut flash-attn 2.8's CUDA build down to one head dimension's bf16 kernels, in an unpacked source tree.

    python -m bench.verl.flash_attn_prune SRC_DIR --head-dim 128   # then: pip wheel SRC_DIR (build_flash_attn.sh)

A full sm_90 build compiles 72 kernel files (6 head dimensions × fp16/bf16 × forward, backward and split-KV
forward, each causal or not), 3 minutes or more each. A model family uses one head dimension (Qwen3 and Llama: 128)
and verl trains in bf16, so 6 of those files are all its packed attention runs. This keeps them: setup.py's source
list loses the other 66, and flash_api.cpp's two dispatch macros (csrc/flash_attn/src/static_switch.h) instantiate
only the kept kernels, so nothing refers to a missing one. Any other head dimension or fp16 then fails with
flash-attn's own error type (a TORCH_CHECK naming what this build has), never with wrong numbers.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

HEAD_DIMS = (32, 64, 96, 128, 192, 256)  # flash_api's buckets: a head dim d runs the smallest kernel ≥ d
KERNELS_PER_HEAD_DIM = 6  # fwd, bwd, fwd_split, each plain and causal
SWITCHES = "csrc/flash_attn/src/static_switch.h"
# One macro definition: from its #define to the `}()` that closes its lambda.
MACRO = r"#define {name}\((?:[^)]*)\)[^\n]*\n(?:[^\n]*\\\n)*?[^\n]*\}}\(\)\n"


class PruneError(RuntimeError):
    """The source tree is not the flash-attn layout this prunes (another version): nothing was written."""


def prune_sources(setup_py: str, head_dim: int) -> str:
    """setup.py with only flash_api.cpp and the bf16 kernel files of `head_dim` left in its CUDA source list."""
    kernel = re.compile(r'^\s*"csrc/flash_attn/src/flash_(?:fwd|bwd|fwd_split)_hdim(\d+)_(fp16|bf16)[a-z_]*_sm80\.cu",\n',
                        re.MULTILINE)
    kept = [m for m in kernel.finditer(setup_py) if (int(m.group(1)), m.group(2)) == (head_dim, "bf16")]
    if len(kept) != KERNELS_PER_HEAD_DIM:
        raise PruneError(f"setup.py lists {len(kept)} bf16 kernel files for head dim {head_dim}, expected "
                         f"{KERNELS_PER_HEAD_DIM} (flash-attn 2.8's layout)")
    return kernel.sub(lambda m: m.group(0) if (int(m.group(1)), m.group(2)) == (head_dim, "bf16") else "", setup_py)


def prune_switches(header: str, head_dim: int) -> str:
    """static_switch.h with FP16_SWITCH always bf16 and HEADDIM_SWITCH always `head_dim`, each checking its input."""
    lower = max([d for d in HEAD_DIMS if d < head_dim], default=0)
    replacements = {
        "FP16_SWITCH": (
            "#define FP16_SWITCH(COND, ...)                                                        \\\n"
            "  [&] {                                                                               \\\n"
            '    TORCH_CHECK(!(COND), "this flash-attn build has bf16 kernels only '
            '(bench/verl/build_flash_attn.sh --head-dim)"); \\\n'
            "    using elem_type = cutlass::bfloat16_t;                                            \\\n"
            "    return __VA_ARGS__();                                                             \\\n"
            "  }()\n"),
        "HEADDIM_SWITCH": (
            "#define HEADDIM_SWITCH(HEADDIM, ...)                                                  \\\n"
            "  [&] {                                                                               \\\n"
            f"    TORCH_CHECK(HEADDIM > {lower} && HEADDIM <= {head_dim}, \"this flash-attn build has the "
            f"kernels of head dim {head_dim} only, got \", HEADDIM); \\\n"
            f"    constexpr static int kHeadDim = {head_dim};                                        \\\n"
            "    return __VA_ARGS__();                                                             \\\n"
            "  }()\n"),
    }
    for name, text in replacements.items():
        header, count = re.subn(MACRO.format(name=name), lambda _, text=text: text, header)
        if count != 1:
            raise PruneError(f"{SWITCHES}: found {count} definitions of {name}, expected 1")
    return header


def prune_tree(src: Path, head_dim: int) -> None:
    """Rewrite setup.py and static_switch.h under `src` in place (both checked before either is written)."""
    if head_dim not in HEAD_DIMS:
        raise PruneError(f"--head-dim {head_dim}: flash-attn 2.8 has kernels for head dims {', '.join(map(str, HEAD_DIMS))}")
    setup_py, switches = src / "setup.py", src / SWITCHES
    for path in (setup_py, switches):
        if not path.is_file():
            raise PruneError(f"{path}: missing (not an unpacked flash-attn 2.8 source tree)")
    new_setup = prune_sources(setup_py.read_text(), head_dim)
    new_switches = prune_switches(switches.read_text(), head_dim)
    setup_py.write_text(new_setup)
    switches.write_text(new_switches)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("src", type=Path, help="an unpacked flash-attn 2.8 sdist")
    parser.add_argument("--head-dim", type=int, required=True, help=f"one of {HEAD_DIMS}")
    args = parser.parse_args(argv)
    try:
        prune_tree(args.src, args.head_dim)
    except PruneError as error:
        print(f"flash_attn_prune: {error}", file=sys.stderr)
        return 2
    print(f"flash_attn_prune: {args.src} now builds the {KERNELS_PER_HEAD_DIM} bf16 kernel files of head dim "
          f"{args.head_dim}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
