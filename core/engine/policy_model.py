"""The policy as the engine runs it: an HF causal LM whose forward returns the log-probs and entropy of
the response tokens, computed from hidden states by the chunked head (`logprob_head`), never the
(tokens × vocab) logits, and only at the positions that predict a response token.

It keeps the LM's own `model` and `lm_head` children, so its parameter names and state dict are the
HF model's: checkpoints, `merge` and the weight sync into vLLM see no difference.
"""

from __future__ import annotations

import torch

from core.engine.logprob_head import DEFAULT_CHUNK_TOKENS, log_probs_and_entropy


class PolicyLM(torch.nn.Module):
    def __init__(self, lm: torch.nn.Module, chunk_tokens: int = DEFAULT_CHUNK_TOKENS):
        super().__init__()
        head = lm.get_output_embeddings()
        if getattr(head, "bias", None) is not None or getattr(lm.config, "final_logit_softcapping", None):
            raise ValueError(f"{type(lm).__name__}: the chunked log-prob head supports a plain linear lm_head "
                             "(no bias, no logit soft-capping)")
        self.model, self.lm_head, self.config = lm.model, head, lm.config
        self.chunk_tokens = chunk_tokens

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor, predict_index: torch.Tensor,
                labels: torch.Tensor, temperature: float = 1.0, **attention_kwargs):
        """(M,) log p(labels) and entropy at the flat positions `predict_index` of the (B, L) input.

        `attention_kwargs`: `attention_mask` for padded rows, or the varlen `cu_seq_lens_*` for one
        packed row (see `core.engine.packing`).
        """
        hidden = self.model(input_ids=input_ids, position_ids=position_ids, use_cache=False,
                            **attention_kwargs).last_hidden_state  # (B, L, D)
        hidden = hidden.reshape(-1, hidden.shape[-1])[predict_index]  # (M, D)
        return log_probs_and_entropy(hidden, self.lm_head.weight, labels, temperature, self.chunk_tokens)
