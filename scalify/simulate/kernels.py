"""numpy kernels for the canonical ops, one device at a time.

Floats are held in float64 so that a different summation order never looks like a bug;
`convert` to a narrower float rounds through that type, so lost precision does show.
Integers are int64 with HLO's truncating division; predicates are bool.
"""

from __future__ import annotations

import math
import re

import numpy as np

from scalify.ir import Node

from . import indexing


class NotSimulable(Exception):
    """The op has no numeric semantics here (opaque, pad, ...): the graph is not simulated."""


def dtype_kind(dtype: str) -> str:
    if dtype == "pred":
        return "pred"
    if dtype.startswith(("f", "bf")):
        return "float"
    return "int"


def host(value, dtype: str) -> np.ndarray:
    """A value in the simulator's representation for `dtype`."""
    kind = dtype_kind(dtype)
    array = np.asarray(value)
    if kind == "float":
        return array.astype(np.float64)
    if kind == "pred":
        return array.astype(bool)
    return array.astype(np.int64)


_NARROW = {"f16": np.float16, "f32": np.float32}


def _round_to(array: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bf16":
        try:
            import ml_dtypes

            return array.astype(ml_dtypes.bfloat16).astype(np.float64)
        except ImportError:  # pragma: no cover - ml_dtypes comes with jax
            bits = array.astype(np.float32).view(np.uint32) & np.uint32(0xFFFF0000)
            return bits.view(np.float32).astype(np.float64)
    if dtype in _NARROW:
        return array.astype(_NARROW[dtype]).astype(np.float64)
    return array


_NUMBER = re.compile(r"-?inf|nan|true|false|[-+0-9.eE]+")


def constant(node: Node) -> np.ndarray:
    text = str(node.attrs.get("value", ""))
    tokens = _NUMBER.findall(text)
    values = [float(t) if t not in ("true", "false") else t == "true" for t in tokens]
    size = int(np.prod(node.shape)) if node.shape else 1
    if len(values) != size:
        raise NotSimulable(f"constant literal {text[:40]!r} does not fill shape {node.shape}")
    return host(np.array(values).reshape(node.shape), node.dtype)


def _divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind == "f":
        with np.errstate(divide="ignore", invalid="ignore"):
            return a / b
    safe = np.where(b == 0, 1, b)
    return np.where(b == 0, 0, np.trunc(a / safe).astype(np.int64))


_COMPARE = {
    "EQ": np.equal,
    "NE": np.not_equal,
    "LT": np.less,
    "LE": np.less_equal,
    "GT": np.greater,
    "GE": np.greater_equal,
}

_UNARY = {
    "neg": np.negative,
    "exp": np.exp,
    "log": np.log,
    "tanh": np.tanh,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "abs": np.abs,
    "sign": np.sign,
    "floor": np.floor,
    "ceil": np.ceil,
    "cos": np.cos,
    "sin": np.sin,
    "exponential_minus_one": np.expm1,
    "log_plus_one": np.log1p,
    "logistic": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "erf": np.vectorize(math.erf, otypes=[np.float64]),
    "not": lambda x: np.logical_not(x) if x.dtype == bool else np.invert(x),
}

_BINARY = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": _divide,
    "max": np.maximum,
    "min": np.minimum,
    "pow": np.power,
    "atan2": np.arctan2,
    "and": lambda a, b: a & b,
    "or": lambda a, b: a | b,
    "xor": lambda a, b: a ^ b,
    "rem": np.fmod,
}

REDUCERS = {
    "sum": np.add,
    "max": np.maximum,
    "min": np.minimum,
    "prod": np.multiply,
    "and": np.logical_and,
    "or": np.logical_or,
}
IDENTITY = {"sum": 0.0, "max": -np.inf, "min": np.inf, "prod": 1.0, "and": True, "or": False}


def _dot(node: Node, lhs: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    a = node.attrs
    letters = iter("abcdefghijklmnopqrstuvwxyz")
    lhs_idx = [""] * lhs.ndim
    rhs_idx = [""] * rhs.ndim
    for l_dim, r_dim in zip(a.get("lhs_batch", ()), a.get("rhs_batch", ()), strict=True):
        lhs_idx[l_dim] = rhs_idx[r_dim] = next(letters)
    for l_dim, r_dim in zip(
        a.get("lhs_contracting", ()), a.get("rhs_contracting", ()), strict=True
    ):
        lhs_idx[l_dim] = rhs_idx[r_dim] = next(letters)
    batch = [lhs_idx[d] for d in a.get("lhs_batch", ())]
    for idx in (lhs_idx, rhs_idx):
        for d, letter in enumerate(idx):
            if not letter:
                idx[d] = next(letters)
    free_l = [
        x
        for d, x in enumerate(lhs_idx)
        if d not in a.get("lhs_batch", ()) and d not in a.get("lhs_contracting", ())
    ]
    free_r = [
        x
        for d, x in enumerate(rhs_idx)
        if d not in a.get("rhs_batch", ()) and d not in a.get("rhs_contracting", ())
    ]
    spec = f"{''.join(lhs_idx)},{''.join(rhs_idx)}->{''.join(batch + free_l + free_r)}"
    return np.einsum(spec, lhs, rhs)


def _reduce(node: Node, args: list[np.ndarray]) -> np.ndarray:
    op = node.attrs["op"]
    dims = tuple(node.attrs["dims"])
    result = REDUCERS[op].reduce(args[0], axis=dims) if dims else args[0]
    if len(args) > 1:
        result = REDUCERS[op](result, args[1])
    return np.asarray(result)


def _broadcast(node: Node, x: np.ndarray) -> np.ndarray:
    dims = tuple(node.attrs["dims"])
    shape = [1] * len(node.shape)
    for i, d in enumerate(dims):
        shape[d] = x.shape[i]
    return np.broadcast_to(x.reshape(shape), node.shape).copy()


def _iota(node: Node) -> np.ndarray:
    dim = int(node.attrs.get("dim", 0))
    shape = [1] * len(node.shape)
    shape[dim] = node.shape[dim]
    return host(np.broadcast_to(np.arange(node.shape[dim]).reshape(shape), node.shape), node.dtype)


def apply(node: Node, args: list[np.ndarray], operand_dtypes: list[str]) -> np.ndarray:
    """One op on one device (collectives and rank_index are handled by the SPMD driver)."""
    op = node.op
    if op == "constant":
        return constant(node)
    if op == "iota":
        return _iota(node)
    if op in _UNARY:
        with np.errstate(all="ignore"):
            return _UNARY[op](args[0])
    if op in _BINARY:
        with np.errstate(all="ignore"):
            return _BINARY[op](args[0], args[1])
    if op == "convert":
        return host(
            _round_to(args[0].astype(np.float64), node.dtype)
            if dtype_kind(node.dtype) == "float"
            else np.trunc(args[0])
            if dtype_kind(node.dtype) == "int" and args[0].dtype.kind == "f"
            else args[0],
            node.dtype,
        )
    if op == "compare":
        return _COMPARE[node.attrs.get("direction", "EQ")](args[0], args[1])
    if op == "select":
        return np.where(args[0], args[1], args[2])
    if op == "clamp":
        return np.minimum(np.maximum(args[1], args[0]), args[2])
    if op == "dot":
        return _dot(node, args[0], args[1])
    if op == "reduce":
        return _reduce(node, args)
    if op == "broadcast":
        return _broadcast(node, args[0])
    if op in ("reshape", "merge", "split"):
        return args[0].reshape(node.shape)
    if op == "transpose":
        return np.transpose(args[0], node.attrs["perm"])
    if op == "slice":
        a = node.attrs
        index = tuple(
            slice(s, e, st) for s, e, st in zip(a["starts"], a["limits"], a["strides"], strict=True)
        )
        return args[0][index]
    if op == "concatenate":
        return np.concatenate(args, axis=int(node.attrs["dim"]))
    if op == "slice_at":
        a = node.attrs
        dim, size = int(a["dim"]), int(a["size"])
        start = min(max(int(args[1]), 0), args[0].shape[dim] - size)
        return np.take(args[0], range(start, start + size), axis=dim)
    if op == "dynamic_slice":
        sizes = tuple(node.attrs.get("sizes", node.shape))
        starts = [
            min(max(int(s), 0), dim - size)
            for s, dim, size in zip(args[1:], args[0].shape, sizes, strict=True)
        ]
        index = tuple(slice(s, s + size) for s, size in zip(starts, sizes, strict=True))
        return args[0][index]
    if op == "top_k":
        return _top_k(node, args[0])
    if op == "cumsum":
        return np.cumsum(args[0], axis=int(node.attrs["dim"])).astype(args[0].dtype)
    if op in ("take", "take_along"):
        return _take(node, args[0], args[1])
    if op == "gather":
        return indexing.gather(node, args[0], args[1])
    if op == "scatter":
        return indexing.scatter(node, args[0], args[1], args[2])
    if op == "one_hot":
        dim, size = int(node.attrs["dim"]), int(node.attrs["size"])
        shape = [1] * (args[0].ndim + 1)
        shape[dim] = size
        return np.expand_dims(args[0], dim) == np.arange(size).reshape(shape)
    if op in ("in_block", "block_offset"):
        size = int(node.attrs["size"])
        start = args[1] * size
        if op == "in_block":
            return (args[0] >= start) & (args[0] < start + size)
        return np.clip(args[0] - start, 0, size - 1)
    raise NotSimulable(
        f"no numeric semantics for `{op}`"
        + (f" ({node.attrs.get('hlo_op')})" if op == "opaque" else "")
    )


def _take(node: Node, table: np.ndarray, index: np.ndarray) -> np.ndarray:
    """`take`: whole slices of the table along `dim`, the index dims first; `take_along`:
    one entry per row along `dim`. Indices are clamped into range, as HLO gather does."""
    dim = int(node.attrs["dim"])
    index = np.clip(index, 0, table.shape[dim] - 1).astype(np.int64)
    if node.op == "take_along":
        return np.take_along_axis(table, index, axis=dim)
    taken = np.take(table, index, axis=dim)
    moved = list(range(dim, dim + index.ndim))
    return np.moveaxis(taken, moved, list(range(index.ndim)))


def _top_k(node: Node, x: np.ndarray) -> np.ndarray:
    """One result of HLO `topk` along the last dim: values (tuple index 0) or their indices
    (1). Ties keep the lower index first, as XLA's sort-based lowering does."""
    k = int(node.attrs["k"])
    keys = -x if node.attrs.get("largest", True) else x
    order = np.argsort(keys, axis=-1, kind="stable")[..., :k]
    if node.attrs.get("part") == 1:
        return host(order, node.dtype)
    return np.take_along_axis(x, order, axis=-1)
