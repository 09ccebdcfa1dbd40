"""What `.srl` patterns may name: ops with their arity and attributes, layouts, constants."""

from __future__ import annotations

from scalify.ir import COLLECTIVES, ELEMENTWISE_BINARY, ELEMENTWISE_UNARY

# Attribute kinds: "S" string, "I" integer. Each maps to an egglog lookup (AttrS / AttrI).
# Every op has `class`: float, int or pred, the kind of its result dtype (an identity over the
# reals may fail over integers: integer division does not distribute over a sum).
COMMON_ATTRS: dict[str, str] = {"class": "S"}

OP_ATTRS: dict[str, dict[str, str]] = {
    "convert": {"from_class": "S", "widens": "S"},
    "all_reduce": {"op": "S", "axes": "S"},
    "all_gather": {"dim": "I", "axes": "S"},
    "reduce_scatter": {"dim": "I", "op": "S", "axes": "S"},
    "all_to_all": {"dim": "I", "split_dim": "I", "concat_dim": "I", "axes": "S"},
    "collective_permute": {"axes": "S"},
    "reduce": {"op": "S", "kept": "S", "kept_out": "S"},
    "mul": {"all_dims": "S"},
    "exp": {"all_dims": "S"},
    "broadcast": {"dims": "S"},
    "dot": {"lhs_batch": "S", "batch_out": "S"},
    "compare": {"direction": "S"},
    "concatenate": {"dim": "I"},
    "slice_at": {"dim": "I", "size": "I", "parts": "I"},
    "rank_index": {"kind": "S"},
    "top_k": {"k": "I", "part": "I"},
    "cumsum": {"dim": "I"},
    "take": {"dim": "I", "index_out": "S"},
    "take_along": {"dim": "I", "index_out": "S"},
    "in_block": {"size": "I"},
    "block_offset": {"size": "I"},
    "one_hot": {"dim": "I", "size": "I"},
    "merge": {"dim": "I", "inner": "I"},
    "split": {"dim": "I", "inner": "I"},
}

OP_ARITY: dict[str, tuple[int, ...]] = {
    **{op: (1,) for op in ELEMENTWISE_UNARY},
    **{op: (2,) for op in ELEMENTWISE_BINARY},
    **{op: (1,) for op in COLLECTIVES},
    "select": (3,),
    "clamp": (3,),
    "dot": (2,),
    "reduce": (1, 2),
    "broadcast": (1,),
    "reshape": (1,),
    "slice_at": (2,),
    "rank_index": (0,),
    "top_k": (1,),
    "cumsum": (1,),
    "merge": (1,),
    "split": (1,),
    "transpose": (1,),
    "slice": (1,),
    "concatenate": (2, 3),
    "pad": (2,),
    "take": (2,),
    "take_along": (2,),
    "in_block": (2,),
    "block_offset": (2,),
    "one_hot": (1,),
    "gather": (2,),
    "scatter": (3,),
}

# `splat(c)`: a scalar broadcast to whatever shape its elementwise user has.
SPLAT = "splat"

# `spread(d, a)` (only in `where`): a real shard on d over a, or a value that is the same along
# d on every device (a scalar fill, a broadcast of an axis-invariant value along a new dim).
LAYOUTS: dict[str, int] = {
    "shard": 2,
    "spread": 2,
    "partial": 2,
    "invariant": 1,
    "replicate": 0,
    # shard(d, a) / partial(op, a) of t, times exp(g - f) broadcast along the dims `dims`
    # names: (d or op, a, g, f, dims), g a baseline term, f a per-device distributed value
    "rescaled_shard": 5,
    "rescaled_partial": 5,
    # the log-sum-exp combine: (g, f, dims) the whole value times exp(g - f) (no placement);
    # (op, a, g) g + log of this device's partial; (op, a, y, dims) this device's partial of t
    # divided by its partial of the baseline term y, broadcast along dims
    "rescaled": 3,
    "log_partial": 3,
    "normalised_partial": 4,
}
RESCALED = frozenset({"rescaled_shard", "rescaled_partial"})
# layouts whose first argument is a partial's op and second its axis
PARTIAL_LIKE = frozenset({"partial", "rescaled_partial", "log_partial", "normalised_partial"})

# Bare names that are constants, not variables, where a string is expected.
CONSTANT_NAMES = frozenset({"sum", "max", "min", "prod", "float", "int", "pred"})

# Dim functions over an op's signature: `outdim(k, d)` is where dim d of operand k lands in
# the output (negative when consumed: -1-i for the i-th contracted pair or a reduced dim);
# `indim(k, e)` is the dim of operand k that lands on output dim e (-1 when none: a new dim).
# An optional first argument names the matched op they refer to (default: the top op).
DIM_FUNCTIONS: dict[str, str] = {"outdim": "OutDim", "indim": "InDim"}

# Integer-valued functions of one bound variable: `axissize(a)` is the size of mesh axis a,
# `litint(c)` the integer a scalar fill's literal c stands for (no match when it is not one).
VALUE_FUNCTIONS: dict[str, tuple[str, str]] = {
    "axissize": ("AxisSize", "axis"),
    "axisstride": ("AxisStride", "axis"),
    "litint": ("LitI", "scalar"),
}

# `size(X, d)`: the size of dim d of the distributed operand X, where the engine states it
# (the tables of lookups: `take` and `take_along`); a rule that asks elsewhere never matches.
SIZE = "size"

# `coord(a)`: the device's coordinate on mesh axis a, a value of its own in the e-graph.
COORD = "coord"
# `a in axes` binds an axis variable to every mesh axis in turn.
AXES_FAMILY = "axes"
