"""Weights from the trainer to rollout engines on devices of their own (`trainer.placement=disaggregated`).

The stream runs over a torch.distributed process group of its own: training rank 0 is its rank 0, the
sender, and rollout worker r its rank r + 1. It is not the training ranks' FSDP group: it is built from a
TCPStore and a gloo (CPU) or NCCL (GPU, device to device) process group directly, so rollout processes join
it without joining the training world, as verl's, OpenRLHF's and slime's disaggregated trainers do.

Weights travel in buckets of at most `rollout.weight_bucket_mb` (a larger tensor goes alone): a header
naming the bucket's tensors, then one broadcast of their bytes. The receiver needs nothing ahead of time, and
each side holds one bucket of extra memory, never a second copy of the model.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from datetime import timedelta

import torch
import torch.distributed as dist

TIMEOUT = timedelta(minutes=30)  # torch's own default for a collective; a dead peer fails it sooner


class WeightGroup:
    """This process's place in the weight stream's group: rank 0 sends, every other rank receives."""

    def __init__(self, address: tuple[str, int], rank: int, size: int, device: torch.device):
        host, port = address
        self.rank, self.device = rank, device
        # Rank 0 serves the rendezvous; kept as an attribute because the group uses it for its lifetime.
        self.store = dist.TCPStore(host, port, size, is_master=rank == 0, timeout=TIMEOUT)
        prefixed = dist.PrefixStore("recipezoo-weights", self.store)
        if device.type == "cuda":
            options = dist.ProcessGroupNCCL.Options()
            options._timeout = TIMEOUT
            self.group = dist.ProcessGroupNCCL(prefixed, rank, size, options)
        else:
            self.group = dist.ProcessGroupGloo(prefixed, rank, size, TIMEOUT)

    def send(self, weights: Iterable[tuple[str, torch.Tensor]], bucket_bytes: int) -> None:
        """Broadcast every (name, tensor) in order, in buckets of at most `bucket_bytes` (one larger tensor
        goes alone)."""
        bucket, size = [], 0
        for name, tensor in weights:
            nbytes = tensor.numel() * tensor.element_size()
            if bucket and size + nbytes > bucket_bytes:
                self._send_bucket(bucket)
                bucket, size = [], 0
            bucket.append((name, tensor))
            size += nbytes
        if bucket:
            self._send_bucket(bucket)
        self._broadcast_header([])  # an empty header ends the stream

    def receive(self) -> Iterator[tuple[str, torch.Tensor]]:
        """(name, tensor) as the sender sent them, bit for bit: views into the bucket each arrived in, received
        when the consumer asks for its first tensor."""
        while header := self._broadcast_header(None):
            data = torch.empty(sum(_aligned(_nbytes(shape, dtype)) for _, shape, dtype in header), dtype=torch.uint8,
                               device=self.device)
            self._broadcast(data)
            offset = 0
            for name, shape, dtype in header:
                nbytes = _nbytes(shape, dtype)
                yield name, data[offset: offset + nbytes].view(_DTYPES[dtype]).reshape(shape)
                offset += _aligned(nbytes)

    def _send_bucket(self, bucket: list[tuple[str, torch.Tensor]]) -> None:
        self._broadcast_header([(name, list(t.shape), str(t.dtype).removeprefix("torch.")) for name, t in bucket])
        parts = []
        for _, tensor in bucket:
            raw = tensor.detach().reshape(-1).view(torch.uint8)
            parts += [raw, raw.new_zeros(_aligned(len(raw)) - len(raw))]
        self._broadcast(torch.cat(parts).to(self.device))

    def _broadcast_header(self, header: list | None) -> list:
        """Rank 0 passes the header (names, shapes, dtypes), the others None; every rank gets it back."""
        encoded = list(json.dumps(header).encode()) if self.rank == 0 else []
        length = torch.tensor([len(encoded)], dtype=torch.int64, device=self.device)
        self._broadcast(length)
        data = (torch.tensor(encoded, dtype=torch.uint8, device=self.device) if self.rank == 0
                else torch.empty(int(length.item()), dtype=torch.uint8, device=self.device))
        self._broadcast(data)
        return json.loads(bytes(data.tolist()))

    def _broadcast(self, tensor: torch.Tensor) -> None:
        self.group.broadcast(tensor, root=0).wait()


_DTYPES = {str(dtype).removeprefix("torch."): dtype for dtype in (
    torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int32, torch.uint8, torch.bool)}


def _nbytes(shape: list[int], dtype: str) -> int:
    return torch.Size(shape).numel() * _DTYPES[dtype].itemsize


def _aligned(nbytes: int) -> int:
    """Each tensor starts at a multiple of 16 bytes in its bucket, so the receiver can view its bytes as its
    dtype in place, whatever dtypes precede it."""
    return -(-nbytes // 16) * 16
