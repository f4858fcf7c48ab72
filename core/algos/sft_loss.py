"""The supervised fine-tuning objective: the negative log-likelihood of the demonstration's trained tokens.

    L = −Σ_t m_t · log π(y_t | y_<t) / N_tokens

maximum likelihood on demonstrations, the SFT stage of Ouyang et al. 2022 (InstructGPT, §3.5). `m` is the
response mask: 1 on the assistant's tokens, 0 on the prompt, tool replies and template glue between turns.
The division follows the loss-aggregation contract (core/algos/aggregation.py): `token-mean` divides by the
tokens of the whole mini-batch, summed over micro-batches and data-parallel ranks, so the gradient is the same
however the batch is split or packed. verl's FSDP SFT trainer divides by each micro-batch's own token count
instead (its `balance_dp_token` evens the ranks, not the micro-batches), which weighs short micro-batches more.

`make_sft_loss` binds the aggregation to the training engine's loss signature
(log_probs, entropy, micro_batch, num_tokens, num_seqs) -> (loss, metrics), as `make_actor_loss` does for RL:
the engine that runs RL updates runs this one unchanged.
"""

from __future__ import annotations

from core.algos.aggregation import aggregate_loss, local_loss_value


def make_sft_loss(loss_agg_mode: str, max_response_length: int):
    def sft_loss(log_probs, entropy, micro, num_tokens, num_seqs):
        mask = micro["response_mask"]
        normalisers = dict(num_tokens=num_tokens, num_seqs=num_seqs, max_response_length=max_response_length)
        loss = aggregate_loss(-log_probs, mask, loss_agg_mode, **normalisers)
        entropy_share = aggregate_loss(entropy, mask, loss_agg_mode, **normalisers)

        def report(share):
            return local_loss_value(share.item(), mask, loss_agg_mode, num_tokens=num_tokens, num_seqs=num_seqs)

        return loss, {"sft/loss": report(loss), "sft/entropy": report(entropy_share)}

    sft_loss.needs_entropy_grad = False  # reported, never trained on: the engine skips its backward
    return sft_loss
