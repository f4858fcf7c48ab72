"""bench/verl/flash_attn_prune.py on a tree laid out as flash-attn 2.8.3's sdist (setup.py's 72 kernel files, the two
dispatch macros of static_switch.h as that release writes them): what it keeps, what the macros become, and that
bad input writes nothing. The CUDA build itself needs nvcc and a GPU (bench/verl/build_flash_attn.sh --head-dim)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bench.verl.flash_attn_prune import HEAD_DIMS, PruneError, main, prune_tree

KERNELS = [f"flash_{kind}_hdim{dim}_{dtype}{causal}_sm80.cu" for kind in ("fwd", "bwd", "fwd_split")
           for causal in ("", "_causal") for dim in HEAD_DIMS for dtype in ("fp16", "bf16")]
SETUP = ("ext_modules.append(\n    CUDAExtension(\n        name=\"flash_attn_2_cuda\",\n        sources=[\n"
         "            \"csrc/flash_attn/flash_api.cpp\",\n"
         + "".join(f"            \"csrc/flash_attn/src/{name}\",\n" for name in KERNELS) + "        ],\n    )\n)\n")
BUCKETS = "".join(f"    {'if' if i == 0 else '}} else if'} (HEADDIM <= {d}) {{ \\\n"
                  f"      constexpr static int kHeadDim = {d}; \\\n      return __VA_ARGS__(); \\\n"
                  for i, d in enumerate(HEAD_DIMS))
SWITCHES = ("#define BOOL_SWITCH(COND, CONST_NAME, ...) \\\n  [&] { \\\n    return __VA_ARGS__(); \\\n  }()\n\n"
            "#define FP16_SWITCH(COND, ...)               \\\n  [&] {                                      \\\n"
            "    if (COND) {                              \\\n      using elem_type = cutlass::half_t;     \\\n"
            "      return __VA_ARGS__();                  \\\n    } else {                                 \\\n"
            "      using elem_type = cutlass::bfloat16_t; \\\n      return __VA_ARGS__();                  \\\n"
            "    }                                        \\\n  }()\n\n"
            "#define HEADDIM_SWITCH(HEADDIM, ...)   \\\n  [&] {                                    \\\n"
            + BUCKETS + "    }                                      \\\n  }()\n")


@pytest.fixture
def tree(tmp_path):
    (tmp_path / "csrc/flash_attn/src").mkdir(parents=True)
    (tmp_path / "setup.py").write_text(SETUP)
    (tmp_path / "csrc/flash_attn/src/static_switch.h").write_text(SWITCHES)
    return tmp_path


def test_keeps_the_six_bf16_kernels_of_one_head_dim(tree):
    assert len(KERNELS) == 72
    prune_tree(tree, 128)
    setup = (tree / "setup.py").read_text()
    kept = [name for name in KERNELS if name in setup]
    assert kept == [f"flash_{kind}_hdim128_bf16{causal}_sm80.cu" for kind in ("fwd", "bwd", "fwd_split")
                    for causal in ("", "_causal")]
    assert '"csrc/flash_attn/flash_api.cpp",' in setup and setup.endswith("        ],\n    )\n)\n")
    switches = (tree / "csrc/flash_attn/src/static_switch.h").read_text()
    assert switches.startswith("#define BOOL_SWITCH(COND, CONST_NAME, ...)")  # other macros untouched
    assert "cutlass::half_t" not in switches and "TORCH_CHECK(!(COND)" in switches
    assert "TORCH_CHECK(HEADDIM > 96 && HEADDIM <= 128" in switches and "kHeadDim = 128;" in switches
    assert "kHeadDim = 64" not in switches and "kHeadDim = 256" not in switches


def test_the_smallest_head_dim_has_no_lower_bucket(tree):
    prune_tree(tree, 32)
    assert "TORCH_CHECK(HEADDIM > 0 && HEADDIM <= 32" in (tree / "csrc/flash_attn/src/static_switch.h").read_text()


def test_bad_input_writes_nothing(tree, capsys):
    before = {path: path.read_text() for path in (tree / "setup.py", tree / "csrc/flash_attn/src/static_switch.h")}
    with pytest.raises(PruneError, match="--head-dim 100: flash-attn 2.8 has kernels for head dims 32, 64"):
        prune_tree(tree, 100)
    (tree / "csrc/flash_attn/src/static_switch.h").write_text(SWITCHES.replace("HEADDIM_SWITCH", "HDIM_SWITCH"))
    before[tree / "csrc/flash_attn/src/static_switch.h"] = SWITCHES.replace("HEADDIM_SWITCH", "HDIM_SWITCH")
    with pytest.raises(PruneError, match="found 0 definitions of HEADDIM_SWITCH, expected 1"):
        prune_tree(tree, 128)
    assert {path: path.read_text() for path in before} == before  # setup.py not written either
    assert main([str(tree / "missing"), "--head-dim", "128"]) == 2
    assert "setup.py: missing (not an unpacked flash-attn 2.8 source tree)" in capsys.readouterr().err


def test_build_script_picks_the_wheel_its_head_dim_asks_for(tmp_path):
    """bench/verl/build_flash_attn.sh installs a wheel already in --wheel-dir that fits the env: a pruned one (hdimD)
    only under --head-dim D, where a full one serves too. A stand-in python answers the env's tags and logs pip."""
    fake = tmp_path / "python"
    fake.write_text('#!/bin/sh\nif [ "$1" = -m ]; then echo "$@" >> "$(dirname "$0")/pip.log"; exit 0; fi\n'
                    'case "$2" in *version_info*) echo "cp312 2.11 13" ;; esac\n')
    fake.chmod(0o755)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    tag = "-cp312-cp312-linux_x86_64.whl"
    for local in ("cu130torch2.11sm90hdim128bf16", "cu130torch2.11sm90hdim64bf16"):
        (wheels / f"flash_attn-2.8.3+{local}{tag}").touch()
    script = Path(__file__).parent.parent / "bench" / "verl" / "build_flash_attn.sh"

    def installed(*args: str) -> str:
        (tmp_path / "pip.log").unlink(missing_ok=True)
        subprocess.run(["bash", str(script), "--python", str(fake), "--wheel-dir", str(wheels), *args],
                       capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
        log = tmp_path / "pip.log"
        return log.read_text().split("/")[-1].strip() if log.exists() else ""

    assert installed("--head-dim", "128") == f"flash_attn-2.8.3+cu130torch2.11sm90hdim128bf16{tag}"
    assert installed() == ""  # no full wheel, no nvcc: nothing installed
    (wheels / f"flash_attn-2.8.3+cu130torch2.11sm90{tag}").touch()
    assert installed() == f"flash_attn-2.8.3+cu130torch2.11sm90{tag}"
    assert installed("--head-dim", "256") == f"flash_attn-2.8.3+cu130torch2.11sm90{tag}"
