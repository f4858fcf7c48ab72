import pytest
import torch

from core.algos import clipped_value_loss


def _value_loss(values, old_values, returns, mask=None, **kwargs):
    """Value loss for one row of tokens; token-mean over the valid tokens unless told."""
    values, old_values, returns = (
        torch.tensor([x], dtype=torch.float64) for x in (values, old_values, returns)
    )  # (1, T)
    mask = torch.ones_like(values, dtype=torch.long) if mask is None else torch.tensor([mask])
    kwargs.setdefault("loss_agg_mode", "token-mean")
    kwargs.setdefault("num_tokens", int(mask.sum()))
    kwargs.setdefault("num_seqs", 1)
    kwargs.setdefault("max_response_length", values.shape[1])
    return clipped_value_loss(values, old_values, returns, mask, **kwargs)


# Token 0: V=1.0, V_old=0.5, R=0.9, ε=0.2: unclipped (0.1)² = 0.01; V clipped to 0.7:
#          (0.7 − 0.9)² = 0.04 -> the clipped term wins, 0.04.
# Token 1: V=0.2, V_old=0.5, R=1.0: unclipped (0.8)² = 0.64; V clipped to 0.3: (0.7)² = 0.49
#          -> the unclipped term wins, 0.64.
EXAMPLE = dict(values=[1.0, 0.2], old_values=[0.5, 0.5], returns=[0.9, 1.0], cliprange_value=0.2)


def test_value_loss_matches_hand_computed_example():
    loss, metrics = _value_loss(**EXAMPLE)
    torch.testing.assert_close(loss, torch.tensor(0.17, dtype=torch.float64))  # ½·(0.04+0.64)/2
    assert metrics["vf_clipfrac"] == 0.5  # only token 0's clipped term is larger
    assert metrics["vpred_mean"] == pytest.approx(0.6)


def test_value_loss_inside_clip_range_is_half_squared_error():
    # |V − V_old| = 0.1 < 0.5: both terms equal (0.5 − 0.0)² = 0.25; ½·0.25 = 0.125
    loss, metrics = _value_loss([0.5], [0.4], [0.0])
    torch.testing.assert_close(loss, torch.tensor(0.125, dtype=torch.float64))
    assert metrics["vf_clipfrac"] == 0.0


def test_value_loss_default_clip_range_is_half():
    # V=2, V_old=0, R=2.4: unclipped 0.16; clipped to 0.5: (1.9)² = 3.61 -> ½·3.61 = 1.805
    loss, metrics = _value_loss([2.0], [0.0], [2.4])
    torch.testing.assert_close(loss, torch.tensor(1.805, dtype=torch.float64))
    assert metrics["vf_clipfrac"] == 1.0


def test_clipped_branch_gives_no_gradient_to_the_value():
    values = torch.tensor([[1.0, 0.2]], requires_grad=True)
    loss, _ = clipped_value_loss(
        values, torch.tensor([[0.5, 0.5]]), torch.tensor([[0.9, 1.0]]), torch.ones(1, 2),
        cliprange_value=0.2, loss_agg_mode="token-mean", num_tokens=2, num_seqs=1,
        max_response_length=2,
    )
    loss.backward()
    # token 0 sits on the clipped branch (saturated clamp); token 1: ½·2·(0.2 − 1.0)/2 = −0.4
    torch.testing.assert_close(values.grad, torch.tensor([[0.0, -0.4]]))


def test_padding_tokens_do_not_affect_value_loss_or_metrics():
    loss, metrics = _value_loss(
        [1.0, 0.2, 50.0], [0.5, 0.5, -50.0], [0.9, 1.0, 7.0], mask=[1, 1, 0],
        cliprange_value=0.2,
    )
    torch.testing.assert_close(loss, torch.tensor(0.17, dtype=torch.float64))
    assert metrics["vf_clipfrac"] == 0.5
    assert metrics["vpred_mean"] == pytest.approx(0.6)


def test_value_loss_uses_requested_aggregation_mode():
    # seq-mean-token-sum over 1 sequence: ½·(0.04 + 0.64) / 1 = 0.34
    loss, _ = _value_loss(**EXAMPLE, loss_agg_mode="seq-mean-token-sum")
    torch.testing.assert_close(loss, torch.tensor(0.34, dtype=torch.float64))


@pytest.mark.parametrize("eps", [0.0, -0.5])
def test_value_clip_range_must_be_positive(eps):
    with pytest.raises(ValueError, match="cliprange_value"):
        _value_loss([0.5], [0.4], [0.0], cliprange_value=eps)
