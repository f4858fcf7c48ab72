"""Is flash-attn's packed (varlen) attention right on this GPU? `flash_attn_varlen_func` against PyTorch's SDPA.

    python -m bench.verl.flash_attn_check          # in the environment verl runs in; exit 0: pass, 1: fail, 2: cannot run

verl's sequence packing (`use_remove_padding=True`) runs every actor forward and backward through
`flash_attn_varlen_func`; a wheel built for another torch, CUDA or GPU can load and still compute garbage. This
packs sequences of unequal length (1 to 2048 tokens) at Qwen3-8B's attention shape (32 query heads, 8 KV heads:
grouped-query, head dim 128), causal, bf16, and compares output and gradients (dq, dk, dv) with SDPA run per
sequence in fp32 on the same bf16 inputs. Tolerance, as flash-attn's own tests set it: flash-attn's largest error
against that fp32 reference at most twice SDPA's own bf16 error (plus 1e-3 for ties at tiny errors).
"""

from __future__ import annotations

import argparse
import sys

import torch
import torch.nn.functional as F

LENGTHS = (1, 7, 128, 129, 300, 511, 1000, 2048)  # unequal, odd, around the kernels' 128-token blocks
HEADS_Q, HEADS_KV, HEAD_DIM = 32, 8, 128  # Qwen3-8B
SLACK = 1e-3  # where SDPA's bf16 error is ~0, 2× of it would demand exact equality


def cu_seqlens(lengths: list[int] | tuple[int, ...], device="cpu") -> torch.Tensor:
    """(B + 1,) int32 start offsets of each sequence in the packed row, and the total at the end."""
    return F.pad(torch.tensor(lengths, device=device).cumsum(0), (1, 0)).to(torch.int32)


def packed_inputs(lengths, dtype: torch.dtype, device, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """q (T, HEADS_Q, D), k and v (T, HEADS_KV, D), T = sum(lengths): the varlen kernels' layout."""
    gen = torch.Generator().manual_seed(seed)
    total = sum(lengths)
    q = torch.randn(total, HEADS_Q, HEAD_DIM, generator=gen)
    k, v = (torch.randn(total, HEADS_KV, HEAD_DIM, generator=gen) for _ in range(2))
    return tuple(t.to(device=device, dtype=dtype).requires_grad_() for t in (q, k, v))


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """Causal attention of each sequence alone (the trainer's own CPU path), in the packed layout (T, H, D)."""
    from core.engine.packing import per_sequence_attention

    return per_sequence_attention(*(t.transpose(0, 1).unsqueeze(0) for t in (q, k, v)), offsets)[0]


def outputs_and_grads(attention, q, k, v, grad_out) -> list[torch.Tensor]:
    """[out, dq, dk, dv] of `attention(q, k, v)` for the upstream gradient `grad_out`, in fp32."""
    out = attention(q, k, v)
    grads = torch.autograd.grad(out, (q, k, v), grad_out.to(out.dtype))
    return [t.float() for t in (out, *grads)]


def verdicts(flash: list[torch.Tensor], sdpa_bf16: list[torch.Tensor], exact: list[torch.Tensor]) -> list[dict]:
    """Per tensor: flash-attn's and SDPA-bf16's largest error against the fp32 reference, and the bound."""
    rows = []
    for name, f, s, e in zip(("out", "dq", "dk", "dv"), flash, sdpa_bf16, exact):
        flash_err, sdpa_err = (f - e).abs().max().item(), (s - e).abs().max().item()
        bound = 2 * sdpa_err + SLACK
        rows.append({"tensor": name, "flash_err": flash_err, "sdpa_bf16_err": sdpa_err, "bound": bound,
                     "ok": flash_err <= bound})
    return rows


def check(device: torch.device) -> list[dict]:
    from flash_attn import flash_attn_varlen_func

    offsets, longest = cu_seqlens(LENGTHS, device), max(LENGTHS)

    def flash(q, k, v):  # takes the KV heads as they are: the kernel does grouped-query attention itself
        return flash_attn_varlen_func(q, k, v, offsets, offsets, longest, longest, causal=True)

    q, k, v = packed_inputs(LENGTHS, torch.bfloat16, device)
    grad_out = torch.randn(q.shape, generator=torch.Generator().manual_seed(1)).to(device)
    exact = outputs_and_grads(lambda *t: reference(*t, offsets),
                              *(t.detach().float().requires_grad_() for t in (q, k, v)), grad_out)
    sdpa_bf16 = outputs_and_grads(lambda *t: reference(*t, offsets), q, k, v, grad_out)
    return verdicts(outputs_and_grads(flash, q, k, v, grad_out), sdpa_bf16, exact)


def main(argv=None) -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    if not torch.cuda.is_available():
        print("flash_attn_check: no CUDA device here; run it on the GPU machine, in the environment verl runs in")
        return 2
    try:
        import flash_attn
    except ImportError as error:
        print(f"flash_attn_check: flash-attn does not import ({error}); bash bench/verl/build_flash_attn.sh installs it")
        return 2
    device = torch.device("cuda")
    rows = check(device)
    print(f"flash-attn {flash_attn.__version__}, torch {torch.__version__}, {torch.cuda.get_device_name(device)}: "
          f"causal bf16 varlen, {len(LENGTHS)} sequences of {min(LENGTHS)}-{max(LENGTHS)} tokens, "
          f"{HEADS_Q} query / {HEADS_KV} KV heads of dim {HEAD_DIM}")
    for row in rows:
        print(f"  {row['tensor']}: max |flash - fp32| {row['flash_err']:.2e}, bound {row['bound']:.2e} "
              f"(2 × SDPA-bf16's {row['sdpa_bf16_err']:.2e} + {SLACK:g}): {'ok' if row['ok'] else 'FAIL'}")
    passed = all(row["ok"] for row in rows)
    print("flash_attn_check: " + ("pass" if passed else "FAIL: do not let verl pack sequences with this build"))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
