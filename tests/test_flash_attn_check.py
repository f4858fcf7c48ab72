"""bench/verl/flash_attn_check.py on CPU: its refusal without a GPU, its packed-offset bookkeeping and per-sequence
reference against attention over the whole packed row with a block-diagonal causal mask, and its verdicts."""

import sys

import pytest
import torch
import torch.nn.functional as F

from bench.verl import flash_attn_check as check


def test_without_cuda_it_refuses_in_one_line(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert check.main([]) == 2
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "no CUDA device" in out


def test_cu_seqlens_are_each_sequences_start_then_the_total():
    assert check.cu_seqlens([3, 1, 4]).tolist() == [0, 3, 4, 8]
    assert check.cu_seqlens([3, 1, 4]).dtype == torch.int32  # what the varlen kernels take


def test_packed_inputs_have_the_varlen_layout_with_grouped_query_heads():
    q, k, v = check.packed_inputs([2, 5], torch.float32, "cpu")
    assert q.shape == (7, check.HEADS_Q, check.HEAD_DIM) and k.shape == v.shape == (7, check.HEADS_KV, check.HEAD_DIM)
    assert q.requires_grad and torch.equal(q, check.packed_inputs([2, 5], torch.float32, "cpu")[0])  # seeded


def test_reference_per_sequence_equals_one_masked_attention_over_the_packed_row():
    lengths = [1, 4, 3]
    q, k, v = check.packed_inputs(lengths, torch.float32, "cpu", seed=3)
    offsets = check.cu_seqlens(lengths)
    # Independently: every query sees the keys of its own sequence at or before it, the KV heads repeated.
    seq = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))  # (T,)
    pos = torch.arange(len(seq))
    allowed = (seq[:, None] == seq[None, :]) & (pos[None, :] <= pos[:, None])  # (T, T)
    repeat = check.HEADS_Q // check.HEADS_KV
    full = F.scaled_dot_product_attention(q.transpose(0, 1), k.repeat_interleave(repeat, 1).transpose(0, 1),
                                          v.repeat_interleave(repeat, 1).transpose(0, 1), attn_mask=allowed)
    torch.testing.assert_close(check.reference(q, k, v, offsets), full.transpose(0, 1), rtol=1e-5, atol=1e-5)
    # A one-token sequence attends to itself alone: its output is its own value row, per KV head.
    torch.testing.assert_close(check.reference(q, k, v, offsets)[0], v[0].repeat_interleave(repeat, 0))


def test_verdicts_bound_flash_by_twice_sdpas_bf16_error():
    exact = [torch.zeros(3)] * 4
    sdpa = [torch.tensor([0.0, 0.01, 0.0])] * 4  # SDPA-bf16's error 0.01: bound 2 × 0.01 + 1e-3 = 0.021
    flash = [torch.tensor([0.02, 0.0, 0.0])] * 3 + [torch.tensor([0.0, 0.0, -0.03])]
    rows = check.verdicts(flash, sdpa, exact)
    assert [row["tensor"] for row in rows] == ["out", "dq", "dk", "dv"]
    assert [row["ok"] for row in rows] == [True, True, True, False]
    assert rows[0]["bound"] == pytest.approx(0.021) and rows[3]["flash_err"] == pytest.approx(0.03)


def test_outputs_and_grads_are_the_attentions_output_and_input_gradients():
    q, k, v = (torch.tensor([[1.0, 2.0]], requires_grad=True) for _ in range(3))
    out, dq, dk, dv = check.outputs_and_grads(lambda a, b, c: a * b + c, q, k, v, torch.tensor([[1.0, 10.0]]))
    assert out.tolist() == [[2.0, 6.0]] and dq.tolist() == [[1.0, 20.0]] and dv.tolist() == [[1.0, 10.0]]


def test_check_passes_a_kernel_that_computes_the_reference_and_fails_one_that_ignores_the_offsets(monkeypatch):
    """The whole check on CPU with stand-in kernels called with flash_attn_varlen_func's arguments."""
    monkeypatch.setattr(check, "LENGTHS", (1, 5, 9))
    fake = type(sys)("flash_attn")
    monkeypatch.setitem(sys.modules, "flash_attn", fake)

    def right(q, k, v, cu_q, cu_k, max_q, max_k, causal):
        return check.reference(q, k, v, cu_q)

    def one_sequence(q, k, v, cu_q, cu_k, max_q, max_k, causal):  # attends across the packed boundaries
        return check.reference(q, k, v, cu_q[[0, -1]])

    fake.flash_attn_varlen_func = right
    assert all(row["ok"] for row in check.check(torch.device("cpu")))
    fake.flash_attn_varlen_func = one_sequence
    assert not any(row["ok"] for row in check.check(torch.device("cpu")) if row["tensor"] == "out")
