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

NAMESPACE = "scalify"

_library = torch.library.Library(NAMESPACE, "FRAGMENT")
_library.define("device_coordinate(int size, int stride, int value) -> Tensor")
_library.define("chunk_at(Tensor x, int dim, int chunks, Tensor index) -> Tensor")


def _device_coordinate(size: int, stride: int, value: int) -> torch.Tensor:
    return torch.tensor(value, dtype=torch.int64)


def _chunk_at(x: torch.Tensor, dim: int, chunks: int, index: torch.Tensor) -> torch.Tensor:
    return x.chunk(chunks, dim)[int(index)].clone()


def _chunk_at_meta(x: torch.Tensor, dim: int, chunks: int, index: torch.Tensor) -> torch.Tensor:
    shape = list(x.shape)
    shape[dim] //= chunks
    return x.new_empty(shape)


def _device_coordinate_meta(size: int, stride: int, value: int) -> torch.Tensor:
    return torch.empty((), dtype=torch.int64, device="meta")


for _key in ("CPU", "CompositeExplicitAutograd"):
    try:
        _library.impl("device_coordinate", _device_coordinate, _key)
        _library.impl("chunk_at", _chunk_at, _key)
        break
    except RuntimeError:  # pragma: no cover - a key this build does not know
        continue
_library.impl("device_coordinate", _device_coordinate_meta, "Meta")
_library.impl("chunk_at", _chunk_at_meta, "Meta")

device_coordinate = torch.ops.scalify.device_coordinate.default
chunk_at = torch.ops.scalify.chunk_at.default
