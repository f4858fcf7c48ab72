"""Log-probs and entropy of the labels straight from hidden states and the lm-head weight, in chunks
of tokens, without keeping (tokens × vocab) logits.

A naive policy update materialises fp32 logits for every token of the micro-batch (16 × 512 tokens ×
152k vocab × 4 B = 5 GB for Qwen3) and keeps them, plus their softmax, for the backward. Here the
forward keeps only the per-token logsumexp and entropy; the backward recomputes one chunk of logits
at a time and forms d(loss)/d(logits) in closed form, so the peak is one chunk's fp32 logits.

For z = h·Wᵀ/τ, p = softmax(z), lse = logsumexp(z), H = lse − Σ p·z:
    d log p_y / dz = onehot(y) − p
    dH / dz       = −p ⊙ (log p + H)          with log p = z − lse
"""

from __future__ import annotations

import torch

DEFAULT_CHUNK_TOKENS = 2048  # 2048 × 152k vocab × 4 B ≈ 1.2 GB of fp32 logits at a time


def _chunk_stats(logits: torch.Tensor, labels: torch.Tensor, temperature: float):
    """logsumexp, log p(label) and entropy of each row of (n, V) logits, in fp32."""
    z = logits.float() / temperature
    # Shifted by the row max, and H as −Σ p·log p rather than lse − Σ p·z: neither cancels two
    # large terms, so both stay exact to fp32 rounding when |z| is in the thousands.
    peak = z.amax(dim=-1, keepdim=True)
    shifted_lse = torch.logsumexp(z - peak, dim=-1)
    full_log_probs = z - peak - shifted_lse[:, None]
    entropy = -(full_log_probs.exp() * full_log_probs).sum(-1)
    return shifted_lse + peak[:, 0], full_log_probs.gather(-1, labels[:, None]).squeeze(-1), entropy


def _chunk_grad(logits, labels, lse, entropy, grad_log_probs, grad_entropy, temperature: float):
    """d(loss)/d(logits) of one chunk, in the logits' dtype, from the closed forms above."""
    full_log_probs = logits.float() / temperature - lse[:, None]
    probs = full_log_probs.exp()
    onehot = torch.arange(logits.shape[-1], device=logits.device)[None, :] == labels[:, None]
    grad = grad_log_probs[:, None] * (onehot.float() - probs)
    grad = grad - grad_entropy[:, None] * probs * (full_log_probs + entropy[:, None])
    return (grad / temperature).to(logits.dtype)


_COMPILED: dict = {}


def _kernels(device: torch.device):
    """On CUDA the two elementwise passes are compiled into a few fused kernels that read the bf16 logits
    once, instead of a dozen full (n, V) fp32 passes; elsewhere they run as written."""
    if device.type != "cuda":
        return _chunk_stats, _chunk_grad
    if not _COMPILED:
        _COMPILED["stats"] = torch.compile(_chunk_stats, dynamic=True)
        _COMPILED["grad"] = torch.compile(_chunk_grad, dynamic=True)
    return _COMPILED["stats"], _COMPILED["grad"]


class _LogProbEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, labels, temperature, chunk_tokens):
        stats, _ = _kernels(hidden.device)
        weight_c = weight.to(hidden.dtype)  # the matmul runs in the hidden states' dtype (bf16 on GPU)
        log_probs = hidden.new_empty(labels.shape, dtype=torch.float32)
        entropy, lse = torch.empty_like(log_probs), torch.empty_like(log_probs)
        for start in range(0, labels.shape[0], chunk_tokens):
            part = slice(start, start + chunk_tokens)
            lse[part], log_probs[part], entropy[part] = stats(hidden[part] @ weight_c.t(), labels[part], temperature)
        ctx.save_for_backward(hidden, weight, labels, lse, entropy)
        ctx.set_materialize_grads(False)  # an output the loss ignores costs no backward work
        ctx.temperature, ctx.chunk_tokens = temperature, chunk_tokens
        return log_probs, entropy

    @staticmethod
    def backward(ctx, grad_log_probs, grad_entropy):
        hidden, weight, labels, lse, entropy = ctx.saved_tensors
        _, grad_fn = _kernels(hidden.device)
        weight_c = weight.to(hidden.dtype)
        zeros = torch.zeros_like(lse)
        grad_log_probs = zeros if grad_log_probs is None else grad_log_probs
        grad_entropy = zeros if grad_entropy is None else grad_entropy
        grad_hidden = torch.empty_like(hidden) if ctx.needs_input_grad[0] else None
        grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) \
            if ctx.needs_input_grad[1] else None
        for start in range(0, labels.shape[0], ctx.chunk_tokens):
            part = slice(start, start + ctx.chunk_tokens)
            grad_logits = grad_fn(hidden[part] @ weight_c.t(), labels[part], lse[part], entropy[part],
                                  grad_log_probs[part], grad_entropy[part], ctx.temperature)  # (n, V)
            if grad_hidden is not None:
                grad_hidden[part] = grad_logits @ weight_c
            if grad_weight is not None:
                grad_weight += (grad_logits.t() @ hidden[part]).float()
        if grad_weight is not None:
            grad_weight = grad_weight.to(weight.dtype)
        return grad_hidden, grad_weight, None, None, None


def log_probs_and_entropy(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor,
                          temperature: float = 1.0, chunk_tokens: int = DEFAULT_CHUNK_TOKENS):
    """(n,) fp32 log p(labels) and entropy under softmax(hidden·weightᵀ / temperature).

    hidden (n, D), weight (V, D) (the lm-head), labels (n,). Differentiable in hidden and weight
    through both outputs; memory beyond the inputs is one chunk of (chunk_tokens, V) fp32 logits.
    """
    if hidden.dim() != 2 or labels.shape != hidden.shape[:1]:
        raise ValueError(f"expected hidden (n, D) and labels (n,), got {tuple(hidden.shape)} and {tuple(labels.shape)}")
    if chunk_tokens < 1:
        raise ValueError(f"actor.logprob_chunk_tokens={chunk_tokens}: must be >= 1")
    return _LogProbEntropy.apply(hidden, weight, labels, float(temperature), int(chunk_tokens))
