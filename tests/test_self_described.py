"""The project describes itself: no tracked file tells how this project's own GPU machines were reached
(file bundles carried there, their output folder, transfer limits) or points at a folder outside the repo.
A user reruns every number with `pip install -e . -r bench/requirements-gpu.txt` and `bash bench/<suite>.sh`."""

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FORBIDDEN = {
    r"\.device-bundle": "a staging folder of this project's own GPU machines",
    r"\.\./shared(?!/data)": "a folder outside the repository",
    r"\.\./shared/data": "a folder outside the repository (tests may fall back to it for data)",
    r"\$\{?OUT\b": "the output folder of this project's own GPU machines",
    r"\b64 MiB\b|transfer limit": "a transfer limit of this project's own GPU machines",
    r"gpu-bundle|GPU_BUNDLE|\b(GPU|vLLM) bundle\b|\bchunks? of (a|the) bundle\b|\bbundle'?s? \w* ?chunks\b":
        "the package bundle this project's own GPU machines needed",
    r"\bdevice (call|tool|session)s?\b|\blent (GPU|machine)s?\b": "how this project's own GPU machines were reached",
}
# A test may read benchmark files from the shared data folder when it exists (a test-only fallback).
DATA_FALLBACK_PATTERN = r"\.\./shared/data"
THIS_FILE = "tests/test_self_described.py"


def tracked_files() -> list[str]:
    try:
        listing = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: no list of tracked files")
    return [name for name in listing.stdout.decode().split("\0") if name]


def allowed(path: str, pattern: str) -> bool:
    return (path == THIS_FILE
            or (pattern == DATA_FALLBACK_PATTERN and path.startswith("tests/")))


def test_no_tracked_file_describes_this_projects_own_machines():
    found = []
    for path in tracked_files():
        try:
            text = (REPO / path).read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue  # binary files, and files deleted in the working tree
        for pattern, why in FORBIDDEN.items():
            if allowed(path, pattern):
                continue
            for match in re.finditer(pattern, text):
                line = text.count("\n", 0, match.start()) + 1
                found.append(f"{path}:{line}: {match.group(0)!r} ({why})")
    assert not found, "describe what a user types instead:\n" + "\n".join(found)


def test_the_patterns_catch_what_they_name():
    samples = ["sh .device-bundle/vllm-rl/c02/stage.sh", "see ../shared/tools/GPU_BUNDLE.md", 'cp x "$OUT/"',
               "carries at most 64 MiB per call", "the bundle's three chunks", "one device call", "a lent GPU"]
    for sample in samples:
        assert any(re.search(pattern, sample) for pattern in FORBIDDEN), sample
    assert not any(re.search(p, "the chunked log-prob head; OUTPUT_DIR=x; $OUTER") for p in FORBIDDEN)
