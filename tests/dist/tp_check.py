"""Tensor parallel (and TP x FSDP2) against a one-process model; rank 0 saves the max differences.

`torchrun --nproc_per_node 2 tp_check.py OUT tp`: pure TP over 2 ranks; compares logits,
gradients and the weights after one SGD step. `torchrun --nproc_per_node 4 tp_check.py OUT 2d`:
a dp=2 x tp=2 mesh, each dp group training on its half of the batch; compares the step's
gradient norm (clipped) and updated weights. The reference is a copy of the same initial model,
run on the whole batch in the same process.
"""

import copy
import sys

import torch
import torch.nn.functional as F
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.tensor import DTensor
from transformers import Qwen3ForCausalLM

from core.engine.distributed import build_mesh, init_distributed
from core.engine.tp import clip_grad_norm, parallelize_decoder, shard_model_2d
from core.models.tiny import build_tiny_tokenizer, tiny_qwen3_config

ROWS, SEQ_LEN = 4, 10


def fixed_inputs(vocab_size: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    input_ids = torch.randint(3, vocab_size, (ROWS, SEQ_LEN), generator=g)
    # Left padding of different lengths, so the attention mask path is exercised as in rollouts.
    attention_mask = (torch.arange(SEQ_LEN) >= torch.tensor([[0], [3], [1], [5]])).long()
    return {"input_ids": input_ids, "attention_mask": attention_mask,
            "position_ids": (attention_mask.cumsum(1) - 1).clamp(min=0),
            "labels": torch.randint(3, vocab_size, (ROWS, SEQ_LEN), generator=g)}


def loss_sum(model, inputs: dict, rows: slice) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits, summed next-token loss over unmasked positions) for `rows` of the batch."""
    logits = model(input_ids=inputs["input_ids"][rows], attention_mask=inputs["attention_mask"][rows],
                   position_ids=inputs["position_ids"][rows], use_cache=False).logits  # (B, T, V)
    per_token = F.cross_entropy(logits.flatten(0, 1), inputs["labels"][rows].flatten(), reduction="none")
    return logits, (per_token * inputs["attention_mask"][rows].flatten()).sum()


def full(t: torch.Tensor) -> torch.Tensor:
    return (t.full_tensor() if isinstance(t, DTensor) else t).detach().clone()


def max_rel_diff(got: dict, want: dict) -> tuple[float, float]:
    """(max abs difference, max of abs difference / max |want|) over all tensors."""
    abs_diff = {k: (got[k] - want[k]).abs().max().item() for k in want}
    rel_diff = {k: abs_diff[k] / max(want[k].abs().max().item(), 1e-12) for k in want}
    return max(abs_diff.values()), max(rel_diff.values())


def check_tp(model, reference, inputs, mesh, rank: int) -> dict:
    parallelize_decoder(model, mesh["tp"])
    logits, loss = loss_sum(model, inputs, slice(None))
    loss.backward()
    grads = {n: full(p.grad) for n, p in model.named_parameters()}
    # The optimizer sees each rank's gradient: a replicated one left as a partial sum (q_norm)
    # would be right after full_tensor() but wrong in the step, so the step is checked as well.
    torch.optim.SGD(model.parameters(), lr=1.0).step()
    weights = {n: full(p) for n, p in model.named_parameters()}
    if rank != 0:
        return {}
    ref_logits, ref_loss = loss_sum(reference, inputs, slice(None))
    ref_loss.backward()
    ref_grads = {n: p.grad.clone() for n, p in reference.named_parameters()}
    torch.optim.SGD(reference.parameters(), lr=1.0).step()
    ref_weights = dict(reference.named_parameters())
    return {"logits": max_rel_diff({"x": logits.detach()}, {"x": ref_logits.detach()}),
            "grads": max_rel_diff(grads, ref_grads), "weights": max_rel_diff(weights, ref_weights),
            "grad_names": sorted(grads), "ref_names": sorted(ref_grads),
            "sharded": sorted(n for n, p in model.named_parameters() if isinstance(p, DTensor))}


def check_2d(model, reference, inputs, mesh, rank: int) -> dict:
    num_tokens = inputs["attention_mask"].sum()  # global normaliser, as the engine's token-mean
    initial = {n: p.detach().clone() for n, p in reference.named_parameters()}
    _, ref_loss = loss_sum(reference, inputs, slice(None))
    (ref_loss / num_tokens).backward()
    # Clip to half the norm so clipping is part of what the weights compare; a wrong gradient
    # scale is then clipped away from the weights but shows in the norm, which is compared too.
    max_norm = torch.nn.utils.get_total_norm([p.grad for p in reference.parameters()]).item() / 2
    ref_norm = torch.nn.utils.clip_grad_norm_(reference.parameters(), max_norm).item()
    torch.optim.SGD(reference.parameters(), lr=1.0).step()

    shard_model_2d(model, mesh)
    dp_size, dp_rank = mesh["dp"].size(), mesh["dp"].get_local_rank()
    rows_per_group = ROWS // dp_size
    _, loss = loss_sum(model, inputs, slice(dp_rank * rows_per_group, (dp_rank + 1) * rows_per_group))
    # FSDP averages over the dp group only: scaling by dp_size (not the world size) turns the
    # average of the groups' shares back into the global sum.
    (loss / num_tokens * dp_size).backward()
    grad_norm = clip_grad_norm(model.parameters(), max_norm)
    # foreach=True: the multi-tensor path CUDA takes by default, over DTensors on two meshes.
    torch.optim.SGD(model.parameters(), lr=1.0, foreach=True).step()
    # The engine's path to unsharded weights (rollout sync, checkpoints) must see through both meshes.
    options = StateDictOptions(full_state_dict=True, cpu_offload=False)
    weights = get_model_state_dict(model, options=options)
    if rank != 0:
        return {}
    ref_weights = reference.state_dict()
    return {"weights": max_rel_diff(weights, ref_weights), "grad_norm": (grad_norm, ref_norm),
            "moved": max_rel_diff(ref_weights, initial)[0], "names": sorted(weights),
            "ref_names": sorted(ref_weights)}


def main(out_path: str, mode: str) -> None:
    world = init_distributed("cpu")
    tokenizer = build_tiny_tokenizer()
    torch.manual_seed(0)  # the same initial weights on every rank and in the reference
    model = Qwen3ForCausalLM(tiny_qwen3_config(tokenizer, num_hidden_layers=2))
    reference = copy.deepcopy(model)
    inputs = fixed_inputs(len(tokenizer))
    tp_size = world.size if mode == "tp" else 2
    mesh = build_mesh(world.size, tp_size, "cpu")
    check = check_tp if mode == "tp" else check_2d
    result = check(model, reference, inputs, mesh, world.rank)
    if world.is_main:
        torch.save(result, out_path)
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
