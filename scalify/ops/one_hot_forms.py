"""The one-hot of an index as both frontends write it: `index == iota` along a new dim, the
form `jax.nn.one_hot` lowers to and `one_hot.py` folds into a canonical `one_hot`. An
embedding's gradient (PyTorch's `index_put` with `accumulate`, JAX's scatter-add of rows) is
read as this one-hot's transpose times the rows."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# op, operands, shape, dtype, attrs -> the new node's id
Emit = Callable[[str, tuple[int, ...], tuple[int, ...], str, dict[str, Any]], int]


def one_hot_of(emit: Emit, index: int, index_dtype: str, dim: int, shape: tuple[int, ...]) -> int:
    """`index == iota` along the new dim `dim` of `shape`."""
    kept = tuple(d for d in range(len(shape)) if d != dim)
    spread = emit("broadcast", (index,), shape, index_dtype, {"dims": kept})
    count = emit("iota", (), shape, index_dtype, {"dim": dim})
    return emit("compare", (spread, count), shape, "pred", {"direction": "EQ"})


def rows_added(
    emit: Emit,
    x: int,
    index: int,
    index_shape: tuple[int, ...],
    index_dtype: str,
    updates: int,
    shape: tuple[int, ...],
    dtype: str,
) -> int:
    """`x` with each row of `updates` added into the row (of x's dim 0) its entry of `index`
    names: `x + one_hot(index)^T updates`, the one-hot over x's rows contracted with the
    updates over the index dims. Exact: an index outside the rows adds nothing, as a
    scatter skips it."""
    k = len(index_shape)
    hot = one_hot_of(emit, index, index_dtype, k, (*index_shape, shape[0]))
    hot = emit("convert", (hot,), (*index_shape, shape[0]), dtype, {"dtype": dtype})
    dims = tuple(range(k))
    contract = {"lhs_contracting": dims, "rhs_contracting": dims, "lhs_batch": (), "rhs_batch": ()}
    added = emit("dot", (hot, updates), shape, dtype, contract)
    return emit("add", (x, added), shape, dtype, {})
