"""Token entropy and label log-probabilities from logits of shape (..., V)."""

from __future__ import annotations

import torch

# Tokens upcast to fp32 at once in the low-precision path: 512 × 152k vocab × 4 B ≈ 300 MB.
_LOW_PRECISION_CHUNK = 512


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """H = logsumexp(z) − Σ softmax(z)·z, shape (...,); stable for large |z|."""
    # H is shift-invariant; subtracting the row max first avoids cancelling two ~max(z) terms,
    # which loses ~1e-4 in fp32 at |z| ≈ 1000. Detached: the shift carries no gradient anyway.
    shifted = logits - logits.max(dim=-1, keepdim=True).values.detach()  # (..., V)
    probs = torch.softmax(shifted, dim=-1)
    return torch.logsumexp(shifted, dim=-1) - (probs * shifted).sum(dim=-1)


def log_probs_from_logits(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """log softmax(z)[label], shape of labels (...,), without a full (..., V) log-softmax copy."""
    if logits.dtype in (torch.float32, torch.float64):
        picked = logits.gather(-1, labels.unsqueeze(-1)).squeeze(-1)  # (...,)
        return picked - torch.logsumexp(logits, dim=-1)
    # bf16/fp16: logsumexp in low precision is too coarse, so upcast a chunk of tokens at a
    # time; peak extra memory is one chunk, not a fp32 copy of the whole (..., V) tensor.
    flat_logits = logits.reshape(-1, logits.shape[-1])  # (N, V)
    flat_labels = labels.reshape(-1, 1)  # (N, 1)
    chunks = [
        torch.log_softmax(chunk.float(), dim=-1).gather(-1, chunk_labels).squeeze(-1)
        for chunk, chunk_labels in zip(
            flat_logits.split(_LOW_PRECISION_CHUNK), flat_labels.split(_LOW_PRECISION_CHUNK)
        )
    ]
    return torch.cat(chunks).reshape(labels.shape)
