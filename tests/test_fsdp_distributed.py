"""2-rank FSDP2 (torchrun, gloo) gives the same update as 1 rank, for every loss aggregation mode."""

from pathlib import Path

import pytest
import torch

from core.algos.aggregation import AGG_MODES
from tests.helpers_dist import run_script

SCRIPT = Path(__file__).parent / "dist" / "fsdp_update.py"


def _run(nproc: int, out: Path, mode: str, *extra: str) -> dict:
    return run_script(SCRIPT, nproc, out, mode, *extra)


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


def test_token_budget_micro_batches_run_as_many_forwards_on_every_rank(tmp_path):
    """actor.micro_batch_tokens=17 packs rank 0's rows into 4 micro-batches and rank 1's into 2; unless rank 1 splits
    its own to 4, rank 0's extra forwards wait in FSDP2's weight gathers that rank 1 never joins (the 8B DAPO run on
    2 GPUs hung so). The update still equals one rank's."""
    from core.engine.packing import token_budget_groups
    from core.models.tiny import build_tiny_tokenizer
    from tests.dist.fsdp_update import fixed_batch

    shards = fixed_batch(len(build_tiny_tokenizer())).chunk(2)
    counts = [len(token_budget_groups(shard["attention_mask"].sum(dim=1).numpy(), 17)) for shard in shards]
    assert counts == [4, 2], "the ranks must pack into different counts, or this test checks nothing"
    one = _run(1, tmp_path / "one.pt", "token-mean")
    two = _run(2, tmp_path / "two.pt", "token-mean", "17")
    for key in one:
        torch.testing.assert_close(two[key], one[key], atol=1e-5, rtol=1e-4, msg=f"weight {key} differs")


def _initial_weights() -> dict:
    from transformers import Qwen3ForCausalLM

    from core.models.tiny import build_tiny_tokenizer, tiny_qwen3_config

    torch.manual_seed(0)
    model = Qwen3ForCausalLM(tiny_qwen3_config(build_tiny_tokenizer(), num_hidden_layers=2))
    return {k: v.detach().clone() for k, v in model.state_dict().items()}
