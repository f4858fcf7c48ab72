"""The training phases' CUDA caching allocator: expandable segments (`actor.expandable_segments=true`).

PyTorch's caching allocator keeps the blocks it carved for one micro-batch's shapes and carves new ones for the
next micro-batch's, so packed micro-batches of varying length leave cached blocks no later request fits: the
`allocator_cache` part of core/trainer/memory_estimate.py, fit at 1.6 sets of token-sized activations on the
8B H200 rows. With expandable segments the allocator maps pages into one growing segment per stream instead,
and a freed tail is reused by any later size. vLLM's sleep-mode pool (CuMemAllocator) refuses expandable segments,
so they are switched on only while a colocated vLLM engine sleeps and off before it allocates again (wake up,
weight sync), as verl does around its rollout. No-op without CUDA.
"""

from __future__ import annotations

import torch


def set_expandable_segments(enabled: bool) -> None:
    """Switch the CUDA caching allocator's expandable segments on or off from here on (no-op without CUDA)."""
    if not torch.cuda.is_available():
        return
    setting = f"expandable_segments:{enabled}"
    accelerator_setting = getattr(torch._C, "_accelerator_setAllocatorSettings", None)  # torch ≥ 2.12
    if accelerator_setting is not None:
        accelerator_setting(setting)
    else:
        torch.cuda.memory._set_allocator_settings(setting)
