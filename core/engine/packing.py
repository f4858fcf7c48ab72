"""Padding removal: a micro-batch of left-padded prompts + right-padded responses becomes one row of
real tokens, sequences back to back, and attention runs per sequence on `cu_seqlens` (varlen).

RL batches are ragged (responses from 20 to 2000 tokens), so a padded micro-batch spends much of
its compute on padding; packed, every FLOP is a real token's. Token-budget micro-batches
(`token_budget_groups`) then give each forward about the same number of tokens instead of the same
number of rows, so long responses no longer set the memory peak for the whole batch.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from core.batch import Batch

ATTENTION_NAME = "recipezoo_varlen"


@dataclass
class ResponseRows:
    """One micro-batch as the policy forward takes it. `predict_index` are the flat positions whose
    outputs predict the response tokens `labels`; `rows`/`cols` place those tokens back into the
    (B, T_resp) layout. Packed: `input_ids` is (1, T) real tokens and `cu_seqlens` marks the
    sequences; padded: `input_ids` is (B, L) with its `attention_mask`."""

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    predict_index: torch.Tensor  # (M,)
    labels: torch.Tensor  # (M,)
    rows: torch.Tensor  # (M,)
    cols: torch.Tensor  # (M,)
    response_shape: tuple[int, int]  # (B, T_resp)
    attention_mask: torch.Tensor | None = None  # padded only
    cu_seqlens: torch.Tensor | None = None  # packed only: (B + 1,) int32 sequence starts
    max_seqlen: int = 0

    def attention_kwargs(self) -> dict:
        """What HF's decoder forwards to each attention call (transformers' FlashAttentionKwargs names)."""
        if self.cu_seqlens is None:
            return {"attention_mask": self.attention_mask}
        # No mask: the mask function registered with the attention (`register_varlen_attention`) returns
        # none for it, so no (T × T) mask is built; every decoder family accepts attention_mask=None.
        return {"attention_mask": None,
                "cu_seq_lens_q": self.cu_seqlens, "cu_seq_lens_k": self.cu_seqlens,
                "max_length_q": self.max_seqlen, "max_length_k": self.max_seqlen}

    def scatter(self, values: torch.Tensor) -> torch.Tensor:
        """(M,) per-token values -> (B, T_resp), zero where there is no response token."""
        out = values.new_zeros(self.response_shape)
        out[self.rows, self.cols] = values
        return out


def response_rows(micro: Batch, device: torch.device, packed: bool) -> ResponseRows:
    attention_mask = micro["attention_mask"].bool()  # (B, L)
    responses = micro["responses"]  # (B, T_resp)
    batch_size, width = attention_mask.shape
    offset = width - responses.shape[1]  # column of the first response token
    rows, cols = attention_mask[:, offset:].nonzero(as_tuple=True)
    common = dict(labels=responses[rows, cols].to(device), rows=rows.to(device), cols=cols.to(device),
                  response_shape=tuple(responses.shape))
    if not packed:
        # The output at column c predicts the token at c + 1.
        return ResponseRows(input_ids=micro["input_ids"].to(device), position_ids=micro["position_ids"].to(device),
                            predict_index=(rows * width + cols + offset - 1).to(device),
                            attention_mask=micro["attention_mask"].to(device), **common)
    lengths = attention_mask.sum(dim=1)  # (B,)
    if bool((lengths == 0).any()):
        raise ValueError("packing: a sequence with no tokens (attention_mask all zero)")
    flat_position = attention_mask.reshape(-1).long().cumsum(0).reshape(batch_size, width) - 1  # (B, L)
    # Every response has a prompt token before it, so p - 1 stays inside the same sequence.
    return ResponseRows(input_ids=micro["input_ids"][attention_mask].unsqueeze(0).to(device),
                        position_ids=micro["position_ids"][attention_mask].unsqueeze(0).to(device),
                        predict_index=(flat_position[rows, cols + offset] - 1).to(device),
                        cu_seqlens=F.pad(lengths.cumsum(0), (1, 0)).to(torch.int32).to(device),
                        max_seqlen=int(lengths.max()), **common)


def token_budget_groups(lengths: np.ndarray | torch.Tensor, max_tokens: int) -> list[list[int]]:
    """Row indices in micro-batches of at most `max_tokens` real tokens (first-fit decreasing), so
    each forward carries about the same work. A sequence longer than the budget gets its own group."""
    lengths = np.asarray(lengths, dtype=np.int64)
    if max_tokens < 1:
        raise ValueError(f"actor.micro_batch_tokens={max_tokens}: must be >= 1")
    groups: list[list[int]] = []
    loads: list[int] = []
    for row in np.argsort(-lengths, kind="stable"):
        length = int(lengths[row])
        fit = next((g for g, load in enumerate(loads) if load + length <= max_tokens), None)
        if fit is None:
            groups.append([int(row)])
            loads.append(length)
        else:
            groups[fit].append(int(row))
            loads[fit] += length
    return [sorted(group) for group in groups]


def split_groups_to(groups: list[list[int]], lengths: np.ndarray | torch.Tensor, count: int) -> list[list[int]]:
    """`groups` split until there are `count` of them: each time the one of most tokens among those of two rows or
    more, into two of about equal tokens (its rows taken alternately by length). A split group never outgrows the
    token budget its parent kept. Used to give every rank as many micro-batches as the rank that has the most."""
    lengths = np.asarray(lengths, dtype=np.int64)
    groups = [list(group) for group in groups]
    while len(groups) < count:
        splittable = [group for group in groups if len(group) > 1]
        if not splittable:
            raise ValueError(f"micro-batches: {len(lengths)} rows on this rank cannot make the {count} micro-batches "
                             "another rank needs under actor.micro_batch_tokens; give every rank as many rows")
        largest = max(splittable, key=lambda group: int(lengths[group].sum()))
        groups.remove(largest)
        by_length = sorted(largest, key=lambda row: -int(lengths[row]))
        groups += [sorted(by_length[0::2]), sorted(by_length[1::2])]
    return groups


# ---- attention ------------------------------------------------------------------------------------
def _varlen_kernel():
    """torch's flash-attention varlen op (torch >= 2.10) and how its version spells 'causal'."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None, {}
    params = inspect.signature(varlen_attn).parameters
    causal = {"window_size": (-1, 0)} if "window_size" in params else {"is_causal": True}
    return varlen_attn, causal


def varlen_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """HF attention-interface function for packed rows: (1, H, T, D) in, (1, T, H, D) out.

    Without `cu_seq_lens_q` (an unpacked call) it is SDPA with the padding mask. On CUDA it calls the flash
    varlen kernel; elsewhere (CPU tests) causal SDPA per sequence, the same function.
    """
    cu_seqlens = kwargs.get("cu_seq_lens_q")
    if cu_seqlens is None:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout)
    if query.shape[0] != 1:
        raise ValueError(f"packed attention expects one packed row, got batch {query.shape[0]}")
    kernel, causal = _varlen_kernel()
    if query.is_cuda and kernel is not None:
        q, k, v = (t[0].transpose(0, 1) for t in (query, key, value))  # (T, H, D)
        if k.shape[1] != q.shape[1]:  # grouped-query attention: the kernel wants equal head counts
            repeat = q.shape[1] // k.shape[1]
            k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)
        max_len = int(kwargs["max_length_q"])
        out = kernel(q, k, v, cu_seqlens, cu_seqlens, max_len, max_len, scale=scaling, **causal)
        return out.unsqueeze(0), None
    return per_sequence_attention(query, key, value, cu_seqlens, scaling), None


def per_sequence_attention(query, key, value, cu_seqlens, scaling=None) -> torch.Tensor:
    """Causal SDPA of each packed sequence alone: (1, H, T, D) inputs (grouped-query KV heads allowed), the
    (1, T, H, D) output the varlen kernel gives; the reference the kernel is checked against."""
    bounds = cu_seqlens.tolist()
    parts = [
        F.scaled_dot_product_attention(query[:, :, s:e], key[:, :, s:e], value[:, :, s:e], is_causal=True,
                                       scale=scaling, enable_gqa=key.shape[1] != query.shape[1])
        for s, e in zip(bounds[:-1], bounds[1:])
    ]
    return torch.cat(parts, dim=2).transpose(1, 2).contiguous()


def register_varlen_attention() -> str:
    """Make `ATTENTION_NAME` a valid `config._attn_implementation` (idempotent)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    AttentionInterface.register(ATTENTION_NAME, varlen_attention)
    AttentionMaskInterface.register(ATTENTION_NAME, _mask_for(ALL_MASK_ATTENTION_FUNCTIONS["sdpa"]))
    return ATTENTION_NAME


def _mask_for(sdpa_mask):
    """Padded rows get SDPA's own mask, so the same model still runs padded batches right. A packed row
    comes without a padding mask and its sequences are separated by `cu_seq_lens_*`, not by a mask:
    building HF's block-diagonal (T × T) mask from its position ids would only cost memory."""

    def mask(*args, attention_mask=None, **kwargs):
        return None if attention_mask is None else sdpa_mask(*args, attention_mask=attention_mask, **kwargs)

    return mask
