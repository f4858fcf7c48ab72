"""Whitening (GAE, REINFORCE++) over a batch split across ranks uses the whole batch's statistics."""

import torch

from core.algos import masked_whiten


def test_whitening_one_rank_part_with_sums_over_ranks_equals_whitening_the_whole_batch():
    g = torch.Generator().manual_seed(0)
    values = torch.randn(4, 5, generator=g)  # (B, T_resp)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0], [1, 1, 1, 1, 0]])
    whole = masked_whiten(values, mask)
    mine, theirs = slice(0, 2), slice(2, 4)  # this rank's rows and the other rank's
    mean = (values * mask).sum() / mask.sum()
    # What the other rank contributes to each sum, in the order masked_whiten asks for them.
    other = iter([mask[theirs].sum(), (values[theirs] * mask[theirs]).sum(),
                  ((values[theirs] - mean).square() * mask[theirs]).sum()])
    part = masked_whiten(values[mine], mask[mine], sum_over_ranks=lambda local: float(local + next(other)))
    torch.testing.assert_close(part * mask[mine], whole[mine] * mask[mine])
    local_only = masked_whiten(values[mine], mask[mine])
    assert not torch.allclose(local_only * mask[mine], whole[mine] * mask[mine]), "the halves' statistics differ"
