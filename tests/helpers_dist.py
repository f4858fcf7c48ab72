"""Launch a test script under torchrun (gloo, CPU) and load the result file it writes."""

import os
import subprocess
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent


def run_script(script: Path, nproc: int, out: Path, *args: str) -> dict:
    """`script out *args` in one plain process (nproc=1) or under torchrun; returns torch.load(out)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    if nproc == 1:
        command = [sys.executable, str(script), str(out), *args]
    else:
        # --standalone: a single-node rendezvous on a free port that torchrun picks itself.
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
                   str(script), str(out), *args]
    # A launch can fail for reasons outside the code under test (a rendezvous port taken between
    # torchrun picking it and binding it); such a launch is retried once. A numeric mismatch is not.
    failures = []
    for _ in range(2):
        result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
        if result.returncode == 0:
            return torch.load(out)
        failures.append(result.stderr[-3000:])
    raise AssertionError(f"{' '.join(command)} failed twice:\n" + "\n---\n".join(failures))
