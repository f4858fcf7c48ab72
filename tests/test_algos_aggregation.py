import pytest
import torch

from core.algos import aggregate_loss, global_normalisers

MODES = ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
T_MAX = 6


def _agg(loss_mat, mask, mode, num_tokens, num_seqs, t_max=T_MAX):
    return aggregate_loss(
        loss_mat, mask, mode, num_tokens=num_tokens, num_seqs=num_seqs, max_response_length=t_max
    )


# Valid tokens: row 0 -> [1, 2], row 1 -> [4]; 3 tokens, 2 sequences.
LOSS = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
MASK = torch.tensor([[1, 1, 0], [1, 0, 0]])


@pytest.mark.parametrize(
    "mode, expected",
    [
        ("token-mean", 7 / 3),  # (1 + 2 + 4) / 3
        ("seq-mean-token-sum", 3.5),  # (3 + 4) / 2
        ("seq-mean-token-mean", 2.75),  # (1.5 + 4) / 2
        ("seq-mean-token-sum-norm", 0.875),  # 7 / (2 * 4)
    ],
)
def test_aggregation_hand_computed(mode, expected):
    loss = _agg(LOSS, MASK, mode, num_tokens=3, num_seqs=2, t_max=4)
    torch.testing.assert_close(loss, torch.tensor(expected))


def test_global_normalisers_count_valid_tokens_and_rows():
    assert global_normalisers(MASK) == (3, 2)


def test_seq_mean_token_mean_row_without_valid_tokens_contributes_zero():
    loss = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    mask = torch.tensor([[1, 1], [0, 0]])
    out = _agg(loss, mask, "seq-mean-token-mean", num_tokens=2, num_seqs=2)
    torch.testing.assert_close(out, torch.tensor(0.75))  # (1.5 + 0) / 2


def _random_problem(seed=0, batch=8):
    gen = torch.Generator().manual_seed(seed)
    theta = torch.randn(batch, T_MAX, generator=gen, requires_grad=True)
    weights = torch.randn(batch, T_MAX, generator=gen)
    lengths = torch.randint(1, T_MAX + 1, (batch,), generator=gen)
    lengths[3] = 0  # one empty response exercises the zero-length guard
    mask = (torch.arange(T_MAX) < lengths.unsqueeze(1)).long()  # (B, T)
    return theta, weights, mask


def _loss_and_grad(mode, splits):
    """Sum of micro-batch shares over `splits` equal chunks, with global normalisers."""
    theta, weights, mask = _random_problem()
    num_tokens, num_seqs = global_normalisers(mask)
    loss_mat = theta.square() * weights  # (B, T), differentiable in theta
    total = sum(
        _agg(lm, m, mode, num_tokens, num_seqs)
        for lm, m in zip(loss_mat.chunk(splits), mask.chunk(splits))
    )
    total.backward()
    return total.detach(), theta.grad


@pytest.mark.parametrize("splits", [2, 4])
@pytest.mark.parametrize("mode", MODES)
def test_aggregation_mode_is_micro_batch_invariant(mode, splits):
    full_loss, full_grad = _loss_and_grad(mode, 1)
    split_loss, split_grad = _loss_and_grad(mode, splits)
    torch.testing.assert_close(split_loss, full_loss)
    torch.testing.assert_close(split_grad, full_grad)


@pytest.mark.parametrize("mode", MODES)
def test_two_dp_ranks_with_micro_batches_sum_to_full_batch_loss(mode):
    theta, weights, mask = _random_problem(seed=1)
    num_tokens, num_seqs = global_normalisers(mask)  # computed once over both ranks
    loss_mat = theta.square() * weights
    full = _agg(loss_mat, mask, mode, num_tokens, num_seqs)

    rank_losses = []
    for rank_loss_mat, rank_mask in zip(loss_mat.chunk(2), mask.chunk(2)):
        micro = zip(rank_loss_mat.chunk(2), rank_mask.chunk(2))
        rank_losses.append(sum(_agg(lm, m, mode, num_tokens, num_seqs) for lm, m in micro))
    torch.testing.assert_close(sum(rank_losses), full)  # what an all-reduce SUM computes


def test_local_normaliser_would_break_invariance():
    # Guards the invariance tests: normalising each micro-batch by its OWN token count differs.
    theta, weights, mask = _random_problem()
    loss_mat = (theta.square() * weights).detach()
    full = _agg(loss_mat, mask, "token-mean", *global_normalisers(mask))
    local = sum(
        _agg(lm, m, "token-mean", *global_normalisers(m)) / 2
        for lm, m in zip(loss_mat.chunk(2), mask.chunk(2))
    )
    assert not torch.allclose(local, full)


def test_local_loss_value_averages_to_the_mini_batch_loss_for_equal_micro_batches():
    from core.algos.aggregation import local_loss_value

    loss_mat = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]])
    mask = torch.ones(4, 2)
    for mode, expected in [("token-mean", 4.5), ("seq-mean-token-sum", 9.0)]:
        shares = [aggregate_loss(loss_mat[i:i + 2], mask[i:i + 2], mode, num_tokens=8, num_seqs=4,
                                 max_response_length=2) for i in (0, 2)]
        reported = [local_loss_value(s.item(), mask[:2], mode, num_tokens=8, num_seqs=4) for s in shares]
        assert sum(reported) / 2 == pytest.approx(expected)
