"""What `.srl` patterns may name: ops with their arity and attributes, layouts, constants."""

from __future__ import annotations

from scalify.ops import OPS

from .ast import Membership

# Attribute kinds: "S" string, "I" integer. Each maps to an egglog lookup (AttrS / AttrI).
# Every op has `class`: float, int or pred, the kind of its result dtype (an identity over the
# reals may fail over integers: integer division does not distribute over a sum).
COMMON_ATTRS: dict[str, str] = {"class": "S"}

# Read from the op registry (`scalify/ops/`): what a rule may name, with how many operands,
# and which attributes it may read; `DIM_MAPPED` ops are the ones `outdim`/`indim` know.
OP_ATTRS: dict[str, dict[str, str]] = {
    name: dict(spec.attrs) for name, spec in OPS.items() if spec.attrs
}
OP_ARITY: dict[str, tuple[int, ...]] = {
    name: spec.arity for name, spec in OPS.items() if spec.arity
}
DIM_MAPPED = frozenset(name for name, spec in OPS.items() if spec.dim_map is not None)


def attr_kinds(op: str) -> dict[str, str]:
    """The attributes a pattern of `op` may read, with their kinds: its own and `class`."""
    return {**COMMON_ATTRS, **OP_ATTRS.get(op, {})}


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
    # layouts of a baseline value itself, not of a device's block (a shard of them is how a
    # device holds a padded or repeated weight): (d, m, n, content) the value padded at the end
    # of dim d from size m to size n with zeros (`zero`) or with values nothing may read
    # (`any`);
    # (d, k, u) every run of u elements along d repeated k times (KV heads repeated to match
    # the q heads)
    "padded": 4,
    "repeated": 3,
    # `spread_padded(d, m, n)` (only in `where`): padded along d from m to n with values
    # nothing reads,
    # or the same all along d (a scalar fill, a broadcast making d a new dim)
    "spread_padded": 3,
    # `spread_repeated(d, k, u)` (only in `where`): repeated along d, or the same all along d
    "spread_repeated": 3,
}
# layouts with no mesh axis
AXIS_FREE = frozenset({"padded", "repeated", "spread_padded", "spread_repeated"})
WHERE_ONLY_SPREADS = frozenset({"spread_padded", "spread_repeated"})
# layouts that are values of the baseline side: the inner links of a chain `x @ L1 @ L2`
VALUE_LAYOUTS = AXIS_FREE - WHERE_ONLY_SPREADS
RESCALED = frozenset({"rescaled_shard", "rescaled_partial"})
# layouts whose first argument is a partial's op and second its axis
PARTIAL_LIKE = frozenset({"partial", "rescaled_partial", "log_partial", "normalised_partial"})

# Bare names that are constants, not variables, where a string is expected.
CONSTANT_NAMES = frozenset(
    {"sum", "max", "min", "prod", "float", "int", "pred", "zero", "any", "lowest"}
)

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

# Integer arithmetic in dim expressions: `quot(n, q)` (exact division: where q does not
# divide n the rule does not match), `times(n, q)`, `plus(n, q)`.
ARITH_FUNCTIONS: dict[str, str] = {"quot": "/", "times": "*", "plus": "+"}

# `size(X, d)`: the size of dim d of the distributed operand X, where the engine states it
# (the tables of lookups: `take` and `take_along`); a rule that asks elsewhere never matches.
SIZE = "size"

# `coord(a)`: the device's coordinate on mesh axis a, a value of its own in the e-graph.
COORD = "coord"
# `a in axes` binds an axis variable to every mesh axis in turn.
AXES_FAMILY = "axes"


def binds_axis(clause: object) -> bool:
    """`a in axes`: a membership binding an axis variable (any other family binds an op)."""
    return isinstance(clause, Membership) and clause.family == AXES_FAMILY
