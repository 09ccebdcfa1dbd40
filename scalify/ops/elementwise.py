"""Elementwise ops: same shapes in, that shape out, one element at a time."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from scalify.layout import Layout, local_shape
from scalify.ops.indexing import (
    asks_for_masked_lookup,
    asks_for_one_device,
    device_slice,
    masked_lookup,
    one_device_select,
)
from scalify.ops.spec import (
    EACH,
    TOGETHER,
    KeyInput,
    OpSpec,
    Scaling,
    ints,
    no_key,
    same_shape_maps,
)
from scalify.values import NotSimulable, dtype_class, host


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

_NARROW = {"f16": np.float16, "f32": np.float32}
_FLOAT_BITS = {"f16": (5, 10), "bf16": (8, 7), "f32": (8, 23), "f64": (11, 52)}


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


def _widens(source: str, target: str) -> bool:
    """Every value of `source` is exact in `target` (exponent and mantissa both no smaller),
    so the cast commutes with adding partial sums; a narrowing cast rounds each part."""
    if source not in _FLOAT_BITS or target not in _FLOAT_BITS:
        return False
    (se, sm), (te, tm) = _FLOAT_BITS[source], _FLOAT_BITS[target]
    return te >= se and tm >= sm


def _convert_kernel(node, args):
    """Floats round through the target type, so lost precision shows; float to int
    truncates."""
    x = args[0]
    kind = dtype_class(node.dtype)
    if kind == "float":
        return host(_round_to(x.astype(np.float64), node.dtype), node.dtype)
    if kind == "int" and x.dtype.kind == "f":
        return host(np.trunc(x), node.dtype)
    return host(x, node.dtype)


def _convert_key(k: KeyInput, sig) -> list[str]:
    source = k.operands[0].dtype
    sig.attrs_s["from_class"] = dtype_class(source)
    sig.attrs_s["widens"] = "yes" if _widens(source, k.node.dtype) else "no"
    return ["from=" + source]


def _all_dims_key(k: KeyInput, sig) -> list[str]:
    """The dims a factor over the whole value lives on."""
    sig.attrs_s["all_dims"] = ints(range(len(k.node.shape)))
    return []


def _compare_key(k: KeyInput, sig) -> list[str]:
    direction = k.node.attrs.get("direction", "")
    sig.attrs_s["direction"] = str(direction)
    return [f"dir={direction}"]


def check_types(attrs: dict, shapes: list[tuple[int, ...]]) -> None:
    """numpy would broadcast operands of different shapes; HLO rejects them."""
    if len({s for s in shapes if s}) > 1:
        raise NotSimulable("ill-typed elementwise op")


def _broadcast_operand(b, shape, out_layout: Layout, dtype: str) -> int:
    keep = sorted(b.rng.choice(len(shape), size=len(shape) - 1, replace=False).tolist())
    small_layout = (
        tuple(
            replace(p, dim=keep.index(p.dim) if p.kind != "partial" else -1)
            for p in out_layout
            if p.kind == "partial" or p.dim in keep
        )
        if b.rng.random() < 0.7
        else b.layout(len(keep))
    )
    x = b.input(tuple(shape[d] for d in keep), dtype, small_layout)
    dist_shape = local_shape(shape, out_layout, b.mesh)
    if b.dist[x].shape != tuple(dist_shape[d] for d in keep):  # HLO would refuse the draw
        raise NotSimulable("a broadcast whose operand's blocks are not its result's")
    return b.op(
        "broadcast",
        (x,),
        dtype,
        {"dims": tuple(keep)},
        lambda side: ({}, shape if side is b.base else dist_shape),
    )


def instance(
    b,
    op: str,
    arity: int,
    int_dtype: bool = False,
    logical: bool = False,
    condition: bool = False,
    draw_attrs: Callable[[np.random.Generator], dict] | None = None,
    result_dtype: str | None = None,
) -> int:
    """`op` over operands of one random shape, laid out alike or at random, some of them
    scalar fills or broadcasts. `int_dtype`: s32 one time in five; `logical`: pred;
    `condition`: the first operand is a pred."""
    rank = int(b.rng.integers(1, 4))
    shape = tuple(b.size() for _ in range(rank))
    dtype = "s32" if int_dtype and b.rng.random() < 0.2 else "f32"
    dtype = "pred" if logical else dtype
    layout = b.layout(rank, allow_partial=b.rng.random() < 0.5, sharded=b.rng.random() < 0.5)
    operands = []
    hints = [b.hint(k) for k in range(arity)]
    hinted = [b.operand_layout(k, rank, layout) for k in range(arity)]
    blocks = ("shard", "padded", "repeated")
    if any(h in blocks for h in hints):
        layout = next(lay for lay, h in zip(hinted, hints, strict=True) if h in blocks)
    for k in range(arity):
        roll = b.rng.random()
        mine = layout if hints[k] in ("splat", "broadcast", None) else hinted[k]
        if condition and k == 0:
            operands.append(b.input(shape, "pred", layout if roll < 0.7 else None))
        elif hints[k] == "splat" or (roll < 0.15 and arity > 1 and k > 0):
            operands.append(b.fill(shape, local_shape(shape, layout, b.mesh), dtype))
        elif rank > 1 and (hints[k] == "broadcast" or (roll < 0.3 and arity > 1)):
            operands.append(_broadcast_operand(b, shape, layout, dtype))
        else:
            operands.append(b.input(shape, dtype, mine if roll < 0.85 else None))
    attrs = draw_attrs(b.rng) if draw_attrs else {}
    return b.op(op, tuple(operands), result_dtype or dtype, attrs)


def _quietly(function):
    def kernel(node, args):
        with np.errstate(all="ignore"):
            return function(*args)

    return kernel


def _elementwise(
    name: str,
    arity: int,
    kernel,
    key=no_key,
    attrs: dict[str, str] | None = None,
    generate=None,
    quiet: bool = True,
    scaling: Scaling | None = None,
    **draw,
) -> OpSpec:
    """An elementwise op. `kernel` takes the operand values, or with `quiet=False` the node
    and the values; `quiet`: numpy's warnings (overflow, a log of 0) are off, as the values
    they warn about are what HLO computes too."""
    return OpSpec(
        name,
        arity=(arity,),
        attrs=attrs or {},
        key=key,
        dim_map=same_shape_maps,
        kernel=_quietly(kernel) if quiet else kernel,
        generate=generate or (lambda b: instance(b, name, arity, **draw)),
        check_types=check_types,
        elementwise=True,
        scaling=scaling,
    )


def _convert_instance(b) -> int:
    if b.hints[:1] == ["coord"]:
        return device_slice(b)
    x = b.input((b.size(), b.size()), "f32", b.operand_layout(0, 2, b.layout(2)))
    return b.op("convert", (x,), ("f64", "bf16", "f16", "s32")[int(b.rng.integers(4))], {})


def _rem_instance(b) -> int:
    if b.hints[:1] == ["op:div"]:
        return device_slice(b)
    return instance(b, "rem", 2)


def _select_instance(b) -> int:
    if asks_for_masked_lookup(b):
        return masked_lookup(b)
    if asks_for_one_device(b):
        return one_device_select(b)
    return instance(b, "select", 3, condition=True)


def _direction(rng: np.random.Generator) -> dict:
    return {"direction": ("EQ", "NE", "LT", "LE", "GT", "GE")[int(rng.integers(6))]}


def _not(x: np.ndarray) -> np.ndarray:
    return np.logical_not(x) if x.dtype == bool else np.invert(x)


OPS = [
    _elementwise("neg", 1, np.negative, scaling=TOGETHER),
    _elementwise("exp", 1, np.exp, key=_all_dims_key, attrs={"all_dims": "S"}),
    _elementwise("log", 1, np.log),
    _elementwise("tanh", 1, np.tanh),
    _elementwise("rsqrt", 1, lambda x: 1.0 / np.sqrt(x)),
    _elementwise("sqrt", 1, np.sqrt),
    _elementwise("abs", 1, np.abs),
    _elementwise("erf", 1, np.vectorize(math.erf, otypes=[np.float64])),
    _elementwise("logistic", 1, lambda x: 1.0 / (1.0 + np.exp(-x))),
    _elementwise("sign", 1, np.sign),
    _elementwise("floor", 1, np.floor),
    _elementwise("ceil", 1, np.ceil),
    _elementwise("not", 1, _not, logical=True),
    _elementwise(
        "convert",
        1,
        _convert_kernel,
        key=_convert_key,
        attrs={"from_class": "S", "widens": "S"},
        generate=_convert_instance,
        quiet=False,
    ),
    _elementwise("exponential_minus_one", 1, np.expm1),
    _elementwise("log_plus_one", 1, np.log1p),
    _elementwise("cos", 1, np.cos),
    _elementwise("sin", 1, np.sin),
    _elementwise("tan", 1, np.tan),
    _elementwise("add", 2, np.add, int_dtype=True, scaling=TOGETHER),
    _elementwise("sub", 2, np.subtract, int_dtype=True, scaling=TOGETHER),
    _elementwise(
        "mul",
        2,
        np.multiply,
        key=_all_dims_key,
        attrs={"all_dims": "S"},
        int_dtype=True,
        scaling=EACH,
    ),
    _elementwise("div", 2, _divide, int_dtype=True, scaling=Scaling("each", (0,))),
    _elementwise("max", 2, np.maximum, scaling=TOGETHER),
    _elementwise("min", 2, np.minimum, scaling=TOGETHER),
    _elementwise("pow", 2, np.power),
    _elementwise(
        "compare",
        2,
        lambda node, args: _COMPARE[node.attrs.get("direction", "EQ")](args[0], args[1]),
        key=_compare_key,
        attrs={"direction": "S"},
        quiet=False,
        draw_attrs=_direction,
        result_dtype="pred",
    ),
    _elementwise("and", 2, lambda a, b: a & b, logical=True),
    _elementwise("or", 2, lambda a, b: a | b, logical=True),
    _elementwise("xor", 2, lambda a, b: a ^ b, logical=True),
    _elementwise("rem", 2, np.fmod, generate=_rem_instance),  # truncated: HLO's, C's, fmod
    _elementwise("mod", 2, np.remainder),  # floored: Python's and torch's `%`
    _elementwise("atan2", 2, np.arctan2),
    # complex numbers (RoPE as a rotation, Llama 4's): the parts of a value, and one made
    # from its parts; the simulator holds complex values as complex128
    _elementwise("real", 1, np.real),
    _elementwise("imag", 1, np.imag),
    _elementwise("complex", 2, lambda a, b: a + 1j * b, result_dtype="c64"),
    _elementwise(
        "select",
        3,
        lambda node, args: np.where(args[0], args[1], args[2]),
        generate=_select_instance,
        quiet=False,
        scaling=Scaling("together", (1, 2)),
    ),
    _elementwise(
        "clamp",
        3,
        lambda node, args: np.minimum(np.maximum(args[1], args[0]), args[2]),
        quiet=False,
        scaling=TOGETHER,
    ),
]
