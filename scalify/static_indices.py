"""Fold index arithmetic on integer constants, and dynamic slices at constant offsets into
static slices.

An unrolled loop (see the HLO frontend's `while_loop`) indexes its stacked weights with the
iteration counter: `dynamic-slice(w, i, 0, 0)` with `i = ((0 + 1) + 1)`. Folding the counter
to a constant and the slice to a static `slice` lets the layout rules treat each iteration's
weights like any other slice. Every step here is an identity on integers.
"""

from __future__ import annotations

from .ir import Graph, Node

_INT_OPS = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
}
_COMPARE = {
    "LT": lambda a, b: a < b,
    "LE": lambda a, b: a <= b,
    "GT": lambda a, b: a > b,
    "GE": lambda a, b: a >= b,
    "EQ": lambda a, b: a == b,
    "NE": lambda a, b: a != b,
}


def fold_static_indices(graph: Graph) -> None:
    alias: dict[int, int] = {}
    before: dict[int, Node] = {}  # constants made for a node, to place right before it
    for node in list(graph.nodes.values()):
        node.operands = tuple(alias.get(o, o) for o in node.operands)
        values = [_int_constant(graph.nodes[o]) for o in node.operands]
        if node.op == "mul" and node.shape == () and values[1] is not None:
            _join_constant_factors(node, graph, values[1], before)
            values = [_int_constant(graph.nodes[o]) for o in node.operands]
        if node.shape != () or not node.operands or None in values:
            if node.op == "select" and _int_constant(graph.nodes[node.operands[0]]) is not None:
                keep = 1 if _int_constant(graph.nodes[node.operands[0]]) else 2
                alias[node.id] = node.operands[keep]
            elif node.op == "dynamic_slice":
                _static_slice(node, graph)
            continue
        if node.op in _INT_OPS and _fits(_INT_OPS[node.op](*values), node.dtype):
            _make_constant(node, _INT_OPS[node.op](*values))
        elif node.op == "convert" and _fits(values[0], node.dtype):
            _make_constant(node, values[0])
        elif node.op == "compare" and node.attrs.get("direction") in _COMPARE:
            _make_constant(node, int(_COMPARE[node.attrs["direction"]](*values)))
        elif node.op == "select":
            alias[node.id] = node.operands[1] if values[0] else node.operands[2]
    if before:
        nodes: dict[int, Node] = {}
        for node_id, node in graph.nodes.items():
            if node_id in before:
                nodes[before[node_id].id] = before[node_id]
            nodes[node_id] = node
        graph.nodes = nodes
    graph.outputs = [alias.get(o, o) for o in graph.outputs]


def _join_constant_factors(node: Node, graph: Graph, factor: int, before: dict[int, Node]) -> None:
    """(x * a) * b as x * (a*b) for a scalar integer x: `rank * 2 * f` reads as one offset
    `rank * (2f)`. Integer multiplication is associative even when it wraps around, so this
    holds whatever x is; it is done only when a*b fits the dtype."""
    inner = graph.nodes[node.operands[0]]
    if inner.op != "mul" or inner.shape != () or inner.dtype != node.dtype:
        return
    first = _int_constant(graph.nodes[inner.operands[1]])
    if first is None or not _fits(first * factor, node.dtype):
        return
    value = {"value": str(first * factor)}
    loc = graph.nodes[node.operands[1]].loc
    joined = Node(max(graph.nodes) + 1, "constant", (), (), node.dtype, value, loc)
    graph.nodes[joined.id] = joined  # found by later lookups; placed before `node` at the end
    before[node.id] = joined
    node.operands = (inner.operands[0], joined.id)


def _static_slice(node: Node, graph: Graph) -> None:
    """dynamic-slice at constant starts: a static slice (starts clamped as HLO clamps them)."""
    x, *starts = node.operands
    offsets = [_int_constant(graph.nodes[s]) for s in starts]
    if None in offsets:
        return
    shape = graph.nodes[x].shape
    sizes = tuple(node.attrs.get("sizes", node.shape))
    begin = [
        min(max(int(o), 0), dim - size) for o, dim, size in zip(offsets, shape, sizes, strict=True)
    ]
    node.op, node.operands = "slice", (x,)
    node.attrs = {
        "starts": tuple(begin),
        "limits": tuple(b + size for b, size in zip(begin, sizes, strict=True)),
        "strides": (1,) * len(sizes),
    }


def _make_constant(node: Node, value: int) -> None:
    node.op, node.operands, node.attrs = "constant", (), {"value": str(int(value))}


def _int_constant(node: Node) -> int | None:
    if (
        node.op != "constant"
        or node.shape != ()
        or not (_is_int(node.dtype) or node.dtype == "pred")
    ):
        return None
    text = str(node.attrs.get("value")).strip().lower()
    if text in ("true", "false"):
        return int(text == "true")
    try:
        return int(text)
    except ValueError:
        return None


def _fits(value: int, dtype: str) -> bool:
    """An integer dtype that holds `value` exactly (no wrap-around to fold away)."""
    if not _is_int(dtype):
        return False
    bits = int(dtype[1:])
    low, high = (0, 2**bits - 1) if dtype[0] == "u" else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    return low <= value <= high


def _is_int(dtype: str) -> bool:
    return dtype.startswith(("s", "u")) and dtype[1:].isdigit()
