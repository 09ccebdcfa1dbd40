"""HLO's general `gather` and `scatter` on numpy arrays, with batching dims.

Written after the XLA operation semantics: a gather takes, for every position of the
indices' batch dims, one slice of the operand starting at the index vector there (clamped so
that the slice fits); a scatter combines every update window into the operand at the index
vector of its position, and skips a window that does not fit (what JAX's `mode="drop"`
relies on). Batching dims pair an operand dim with an indices dim: the position along the
indices dim is the start along the operand dim. Loops run over index positions only, so
these are for the small shapes simulation uses.
"""

from __future__ import annotations

import itertools

import numpy as np

from scalify.ir import Node

_COMBINE = {
    "sum": np.add,
    "prod": np.multiply,
    "max": np.maximum,
    "min": np.minimum,
    "replace": lambda old, new: new,
}


def _start(
    position: tuple[int, ...],
    vector: np.ndarray,
    index_map,
    batching: dict[int, int],
    rank: int,
) -> list[int]:
    """The operand start of one index position: the index vector along the mapped dims,
    the position itself along the batching dims."""
    start = [0] * rank
    for k, d in enumerate(index_map):
        start[d] = int(vector[k])
    for operand_dim, index_dim in batching.items():
        start[operand_dim] = position[index_dim]
    return start


def _index_dims(ndim: int, vector_dim: int) -> list[int]:
    """The indices' dims that are not the index vector, in order."""
    return [e for e in range(ndim) if e != vector_dim]


def gather(node: Node, operand: np.ndarray, index: np.ndarray) -> np.ndarray:
    a = node.attrs
    vector_dim = int(a["index_vector_dim"])
    dims = _index_dims(index.ndim, vector_dim)
    moved = index[..., None] if vector_dim == index.ndim else np.moveaxis(index, vector_dim, -1)
    sizes = a["slice_sizes"]
    batching = {
        d: dims.index(e)
        for d, e in zip(a["operand_batching_dims"], a["start_indices_batching_dims"], strict=True)
    }
    dropped = set(a["collapsed_slice_dims"]) | set(a["operand_batching_dims"])
    window = [d for d in range(operand.ndim) if d not in dropped]
    rank = len(dims) + len(window)  # the output's shape, from the operands
    batch_out = [p for p in range(rank) if p not in a["offset_dims"]]
    shape = [0] * rank
    for p, e in zip(batch_out, dims, strict=True):
        shape[p] = index.shape[e]
    for p, d in zip(a["offset_dims"], window, strict=True):
        shape[p] = sizes[d]
    out = np.zeros(shape, dtype=operand.dtype)
    for position in itertools.product(*(range(n) for n in moved.shape[:-1])):
        start = _start(position, moved[position], a["start_index_map"], batching, operand.ndim)
        for d in a["start_index_map"]:
            start[d] = min(max(start[d], 0), operand.shape[d] - sizes[d])
        piece = operand[tuple(slice(s, s + n) for s, n in zip(start, sizes, strict=True))]
        piece = piece.reshape([sizes[d] for d in window])
        target: list = [slice(None)] * rank
        for p, i in zip(batch_out, position, strict=True):
            target[p] = i
        out[tuple(target)] = piece
    return out


def scatter(node: Node, operand: np.ndarray, index: np.ndarray, updates: np.ndarray) -> np.ndarray:
    a = node.attrs
    vector_dim = int(a["index_vector_dim"])
    dims = _index_dims(index.ndim, vector_dim)
    moved = index[..., None] if vector_dim == index.ndim else np.moveaxis(index, vector_dim, -1)
    batching = {
        d: dims.index(e)
        for d, e in zip(a["input_batching_dims"], a["scatter_indices_batching_dims"], strict=True)
    }
    dropped = set(a["inserted_window_dims"]) | set(a["input_batching_dims"])
    window = [d for d in range(operand.ndim) if d not in dropped]
    scatter_dims = [d for d in range(updates.ndim) if d not in a["update_window_dims"]]
    window_sizes = [updates.shape[d] for d in a["update_window_dims"]]
    sizes = [1] * operand.ndim
    for d, n in zip(window, window_sizes, strict=True):
        sizes[d] = n
    combine = _COMBINE[a["op"]]
    out = operand.copy()
    for position in itertools.product(*(range(n) for n in moved.shape[:-1])):
        start = _start(
            position, moved[position], a["scatter_dims_to_operand_dims"], batching, operand.ndim
        )
        if any(s < 0 or s + n > dim for s, n, dim in zip(start, sizes, operand.shape, strict=True)):
            continue  # a window that does not fit is skipped
        source: list = [slice(None)] * updates.ndim
        for d, i in zip(scatter_dims, position, strict=True):
            source[d] = i
        region = tuple(slice(s, s + n) for s, n in zip(start, sizes, strict=True))
        piece = updates[tuple(source)].reshape(sizes)
        out[region] = combine(out[region], piece)
    return out
