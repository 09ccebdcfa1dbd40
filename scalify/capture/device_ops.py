"""Ops that name what a traced program computes from the device it runs on.

`make_fx` traces one rank, so a value the program computes from its rank on the host (DTensor's
vocab-parallel embedding offset `r * rows`, the chunk a `Replicate -> Shard` redistribute
keeps) lands in the graph as that rank's number. `device_probe.py` finds those values and puts
these ops in their place, so the graph says `coordinate(tp) * 32` where it said `0`:

- `scalify::device_coordinate(size, stride)`: this device's coordinate on the mesh axis of
  `size` devices whose neighbours' global ranks are `stride` apart, a 0-d int64 tensor;
- `scalify::chunk_at(x, dim, chunks, index)`: `x.chunk(chunks, dim)[index]` for a 0-d index
  tensor (what `torch.chunk(x)[rank]` is when the rank is a value, not a number).

They are real registered ops (run and exported like any other: their eager value is the
traced rank's), which the FX frontend reads into `rank_index` arithmetic and `slice_at`.
"""

from __future__ import annotations

import torch


@torch.library.custom_op("scalify::device_coordinate", mutates_args=())
def _device_coordinate(size: int, stride: int, value: int) -> torch.Tensor:
    return torch.tensor(value, dtype=torch.int64)


@_device_coordinate.register_fake
def _(size: int, stride: int, value: int) -> torch.Tensor:
    return torch.empty((), dtype=torch.int64)


@torch.library.custom_op("scalify::chunk_at", mutates_args=())
def _chunk_at(x: torch.Tensor, dim: int, chunks: int, index: torch.Tensor) -> torch.Tensor:
    return x.chunk(chunks, dim)[int(index)].clone()


@_chunk_at.register_fake
def _(x: torch.Tensor, dim: int, chunks: int, index: torch.Tensor) -> torch.Tensor:
    shape = list(x.shape)
    shape[dim] //= chunks
    return x.new_empty(shape)


device_coordinate = torch.ops.scalify.device_coordinate.default
chunk_at = torch.ops.scalify.chunk_at.default
