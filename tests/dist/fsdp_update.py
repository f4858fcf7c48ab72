"""One FSDP2 policy update on a fixed batch; rank 0 saves the updated weights.

Run as `python fsdp_update.py OUT MODE [TOKENS]` (1 rank) or `torchrun --nproc_per_node 2 fsdp_update.py OUT MODE
[TOKENS]`. Each rank trains on its contiguous share of the same global batch, with a micro-batch size that differs
between the two launches, so equal weights prove the update independent of both. TOKENS: micro-batches of at most
that many tokens on 2 ranks (`actor.micro_batch_tokens`) instead of 2 rows.
"""

import sys
from types import SimpleNamespace

import torch
from transformers import Qwen3ForCausalLM

from core.algos.actor_loss import make_actor_loss
from core.batch import Batch
from core.engine.distributed import init_distributed
from core.engine.fsdp import FSDPEngine, OptimConfig
from core.models.tiny import build_tiny_tokenizer, tiny_qwen3_config

ROWS, PROMPT_LEN, RESPONSE_LEN = 8, 6, 5


def fixed_batch(vocab_size: int) -> Batch:
    g = torch.Generator().manual_seed(0)
    responses = torch.randint(3, vocab_size, (ROWS, RESPONSE_LEN), generator=g)
    response_mask = (torch.arange(RESPONSE_LEN) < torch.randint(1, RESPONSE_LEN + 1, (ROWS, 1), generator=g)).long()
    prompts = torch.randint(3, vocab_size, (ROWS, PROMPT_LEN), generator=g)
    attention_mask = torch.cat([torch.ones(ROWS, PROMPT_LEN, dtype=torch.long), response_mask], dim=1)
    return Batch({
        "prompts": prompts, "responses": responses, "response_mask": response_mask,
        "input_ids": torch.cat([prompts, responses], dim=1), "attention_mask": attention_mask,
        "position_ids": (attention_mask.cumsum(1) - 1).clamp(min=0),
        "old_log_probs": -torch.rand(ROWS, RESPONSE_LEN, generator=g) * 3,
        "ref_log_probs": -torch.rand(ROWS, RESPONSE_LEN, generator=g) * 3,
        "advantages": torch.randn(ROWS, RESPONSE_LEN, generator=g),
    })


def main(out_path: str, loss_agg_mode: str, micro_batch_tokens: int | None = None) -> None:
    world = init_distributed("cpu")
    tokenizer = build_tiny_tokenizer()
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(tiny_qwen3_config(tokenizer, num_hidden_layers=2))
    engine = FSDPEngine(model, world, optim=OptimConfig(lr=1.0, weight_decay=0.0, grad_clip=1e9),
                        micro_batch_size=3 if world.size == 1 else 2,
                        micro_batch_tokens=micro_batch_tokens if world.size > 1 else None)
    # SGD(lr=1) makes the update exactly the gradient, so the comparison checks its scale too;
    # Adam would normalise a wrongly scaled gradient away.
    engine.optimizer = torch.optim.SGD(engine.model.parameters(), lr=1.0)
    actor_cfg = SimpleNamespace(policy_loss="ppo_clip", loss_agg_mode=loss_agg_mode, clip_ratio_low=0.2,
                                clip_ratio_high=0.28, clip_ratio_c=3.0, entropy_coeff=0.01,
                                use_kl_loss=True, kl_loss_coef=0.1, kl_loss_type="low_var_kl", kl_cov_coef=1.0)
    shard = fixed_batch(len(tokenizer)).chunk(world.size)[world.rank]
    engine.update(shard, make_actor_loss(actor_cfg, RESPONSE_LEN), mini_batch_size=len(shard))
    weights = engine.full_state_dict()
    if world.is_main:
        torch.save(weights, out_path)
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else None)
