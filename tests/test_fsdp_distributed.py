"""2-rank FSDP2 (torchrun, gloo) gives the same update as 1 rank, for every loss aggregation mode."""

from pathlib import Path

import pytest
import torch

from core.algos.aggregation import AGG_MODES
from tests.helpers_dist import run_script

SCRIPT = Path(__file__).parent / "dist" / "fsdp_update.py"


def _run(nproc: int, out: Path, mode: str) -> dict:
    return run_script(SCRIPT, nproc, out, mode)


@pytest.mark.parametrize("mode", AGG_MODES.names())
def test_two_rank_fsdp_update_equals_one_rank(tmp_path, mode):
    before = _initial_weights()
    one = _run(1, tmp_path / "one.pt", mode)
    two = _run(2, tmp_path / "two.pt", mode)
    assert one.keys() == two.keys()
    moved = max((one[k] - before[k]).abs().max().item() for k in one)
    assert moved > 1e-4, "the update did not change the weights; the comparison would be vacuous"
    for key in one:
        torch.testing.assert_close(two[key], one[key], atol=1e-5, rtol=1e-4, msg=f"weight {key} differs")


def _initial_weights() -> dict:
    from transformers import Qwen3ForCausalLM

    from core.models.tiny import build_tiny_tokenizer, tiny_qwen3_config

    torch.manual_seed(0)
    model = Qwen3ForCausalLM(tiny_qwen3_config(build_tiny_tokenizer(), num_hidden_layers=2))
    return {k: v.detach().clone() for k, v in model.state_dict().items()}
