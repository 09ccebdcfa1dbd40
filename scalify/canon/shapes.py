"""The shape and dtype of an op a canonical rule's rewrite builds inside its tree.

A rewrite's top op takes the matched node's place, shape and dtype; an op nested under it is
a new node, whose shape follows from its operands and attributes. The ops a rewrite may nest
are the ones listed here (`BUILT`); the compiler refuses any other at its position. A
`constant` is a scalar of the dtype its user computes in (a sibling operand's, or the user's
own: `broadcast(constant)`, `mul(x, constant)`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from scalify.ir import Node
from scalify.ops import ELEMENTWISE

Shape = tuple[int, ...]


def _same(attrs: dict, operands: list[Node]) -> Shape:
    shapes = {o.shape for o in operands}
    if len(shapes) != 1:
        raise ValueError(f"operands of unequal shapes {sorted(shapes)}")
    return operands[0].shape


def _take(attrs: dict, operands: list[Node]) -> Shape:
    table, index = operands
    dim = int(attrs["dim"])
    return index.shape + table.shape[:dim] + table.shape[dim + 1 :]


def _transpose(attrs: dict, operands: list[Node]) -> Shape:
    (x,) = operands
    perm = tuple(int(d) for d in attrs["perm"])
    if sorted(perm) != list(range(len(x.shape))):
        raise ValueError(f"perm {perm} for rank {len(x.shape)}")
    return tuple(x.shape[d] for d in perm)


def _slice(attrs: dict, operands: list[Node]) -> Shape:
    (x,) = operands
    bounds = list(zip(attrs["starts"], attrs["limits"], attrs["strides"], strict=True))
    if len(bounds) != len(x.shape):
        raise ValueError("slice bounds of another rank")
    return tuple(max(0, math.ceil((hi - lo) / step)) for lo, hi, step in bounds)


def _merge(attrs: dict, operands: list[Node]) -> Shape:
    (x,) = operands
    p = int(attrs["dim"])
    return x.shape[:p] + (x.shape[p] * x.shape[p + 1],) + x.shape[p + 2 :]


def _split(attrs: dict, operands: list[Node]) -> Shape:
    (x,) = operands
    p, inner = int(attrs["dim"]), int(attrs["inner"])
    if inner <= 0 or x.shape[p] % inner:
        raise ValueError(f"dim {p} of {x.shape} does not split by {inner}")
    return x.shape[:p] + (x.shape[p] // inner, inner) + x.shape[p + 1 :]


class NotBuilt(Exception):
    """A nested op whose operands do not fit it (shapes of another rank or size): the
    rewrite does not apply there."""


def built_shape(op: str, attrs: dict, operands: list[Node]) -> Shape:
    try:
        return BUILT[op](attrs, operands)
    except (ValueError, IndexError, KeyError, TypeError) as err:
        raise NotBuilt(f"`{op}` does not fit its operands: {err}") from err


# op -> (its attributes, its operands' nodes) -> its shape (raises ValueError when the
# operands do not fit: the rewrite then does not apply)
BUILT: dict[str, Callable[[dict, list[Node]], Shape]] = {
    **{op: _same for op in ELEMENTWISE if op not in ("select", "clamp")},
    "select": lambda attrs, operands: _same(attrs, operands[1:]),
    "constant": lambda attrs, operands: (),
    "take": _take,
    "transpose": _transpose,
    "slice": _slice,
    "merge": _merge,
    "split": _split,
}


def built_dtype(op: str, operands: list[Node], wanted: str | None) -> str:
    """The dtype of a built op: a comparison's is pred, a cast's the one its user wants,
    every other op's its data operand's (a select's branches, a lookup's table)."""
    if op == "compare":
        return "pred"
    if op == "convert" or not operands:
        if wanted is None:
            raise NotBuilt(f"no dtype for a built `{op}`")
        return wanted
    return operands[1 if op == "select" else 0].dtype
