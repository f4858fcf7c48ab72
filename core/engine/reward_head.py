"""The reward model as the engine runs it: a scalar-head model whose forward returns one score per row, the
head's output at the row's last attended token (the end of its response).

It keeps the HF model's own body and `score` children under their names, so its state dict is the
sequence-classification model's: checkpoints and `recipezoo merge --role reward_model` see no difference.
"""

from __future__ import annotations

import torch


class RewardLM(torch.nn.Module):
    def __init__(self, model: torch.nn.Module):
        super().__init__()
        prefix = model.base_model_prefix
        if not hasattr(model, "score") or not hasattr(model, prefix):
            raise ValueError(f"{type(model).__name__}: a reward model needs a body ({prefix!r}) and a `score` head")
        setattr(self, prefix, getattr(model, prefix))
        self.score, self.config, self.body_name = model.score, model.config, prefix

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        """(B,) fp32 scores of (B, L) rows, each read at its last token whose attention_mask is 1."""
        hidden = getattr(self, self.body_name)(input_ids=input_ids, attention_mask=attention_mask,
                                               position_ids=position_ids, use_cache=False).last_hidden_state  # (B, L, D)
        last = hidden[torch.arange(len(hidden), device=hidden.device), last_token(attention_mask)]  # (B, D)
        # A copy, not a view of the head's (B, 1) output: FSDP2 hooks the backward onto the returned tensor.
        return self.score(last)[:, 0].float().clone()


def last_token(attention_mask: torch.Tensor) -> torch.Tensor:
    """(B,) index of each row's last attended position (left-padded prompt, right-padded response)."""
    positions = torch.arange(attention_mask.shape[1], device=attention_mask.device)
    return torch.where(attention_mask.bool(), positions, -1).max(dim=1).values.clamp(min=0)
