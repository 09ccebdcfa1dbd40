"""Integer ranges: fold the index checks a lookup carries when its index is known in range.

Framework lookups guard their indices: JAX wraps a negative index (`i < 0 ? i + n : i`),
checks bounds and fills NaN outside them, and clamps; a vocab-parallel lookup clips its
local index into the local table. Over the ranges integer values provably have, most of
these tests are decided, and folding them leaves the lookup itself (`take(table, index)`),
which rules can relate.

One assumption is made, and recorded on the graph: an integer input that a lookup uses as
its index (directly, or through JAX's wrap of negative indices) lies in the table's range
`[0, rows)`. That is the contract of every embedding and label lookup; without it the
baseline's own result for such an index is a NaN fill or a clamped row, which no parallel
form reproduces. The simulator draws such inputs from that range.

Reasoning is exact: a range is only narrowed by ops whose result provably fits the dtype,
and a test is folded only when every value in the ranges decides it the same way.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from scalify.ir import ROW_MAJOR_VIEWS, Graph, Node
from scalify.values import literal_number

Range = tuple[float, float]  # lo, hi; +-inf when unbounded

# Ops whose entries are entries of their first operand (a slice at a computed start too).
_UNARY_SAME = {
    "broadcast", "reshape", "merge", "split", "transpose", "slice", "copy", "slice_at",
    "dynamic_slice",
}  # fmt: skip
# Collectives that only move entries between devices: every device runs the same program on
# inputs in the same assumed range, so what one receives lies in the range its sender's has.
_MOVES = {"all_gather", "collective_permute", "all_to_all"}


# (select node, the nodes so far) -> the range its guarded branch is known to keep, if any
GuardedRange = Callable[[Node, dict[int, Node]], "Range | None"]


def fold_int_ranges(graph: Graph, guarded: GuardedRange | None = None) -> dict[int, Range]:
    """Record assumed input ranges, then fold tests and clamps that the ranges decide.
    Returns the ranges of the integer nodes that have one narrower than their dtype's.
    `guarded` reads a select that keeps an index inside a block (index_forms.py): where it
    takes that branch, the branch lies in the block."""
    assumed = lookup_index_inputs(graph)
    for node_id, (lo, hi) in assumed.items():
        graph.nodes[node_id].attrs["assumed_range"] = (lo, hi)
    ranges: dict[int, Range] = {}
    truth: dict[int, bool] = {}
    alias: dict[int, int] = {}
    nodes: dict[int, Node] = {}
    next_id = max(graph.nodes, default=-1) + 1
    for node in graph.nodes.values():
        node.operands = tuple(alias.get(o, o) for o in node.operands)
        target = _folded(node, nodes, ranges, truth)
        if isinstance(target, bool):  # before int: a bool is an int
            nodes.update({n.id: n for n in _pred_constant(node, target, next_id)})
            next_id += 1
            truth[node.id] = target
            nodes[node.id] = node
            continue
        if isinstance(target, int):
            alias[node.id] = target
            continue
        nodes[node.id] = node
        value = _range(node, nodes, ranges, truth, graph.num_partitions)
        if value is not None and node.op == "select" and guarded is not None:
            value = _narrowed(node, value, guarded(node, nodes), ranges, nodes)
        if value is not None and is_int_dtype(node.dtype) and _fits(value, node.dtype):
            ranges[node.id] = value
        known = _truth(node, nodes, truth)
        if known is not None:
            truth[node.id] = known
    graph.nodes = nodes
    graph.outputs = [alias.get(o, o) for o in graph.outputs]
    graph.equalities = [(alias.get(a, a), alias.get(b, b)) for a, b in graph.equalities]
    graph.output_shardings = {alias.get(k, k): v for k, v in graph.output_shardings.items()}
    return ranges


def node_ranges(graph: Graph) -> dict[int, Range]:
    """The range of each integer node narrower than its dtype's, read without folding
    anything (what a reader of the graph's index code may rely on)."""
    ranges: dict[int, Range] = {}
    for node in graph.nodes.values():
        value = _range(node, graph.nodes, ranges, {}, getattr(graph, "num_partitions", None))
        if value is not None and is_int_dtype(node.dtype) and _fits(value, node.dtype):
            ranges[node.id] = value
    return ranges


def converts_exactly(source: Node, target: str, ranges: dict[int, Range]) -> bool:
    """Whether an integer convert of `source` to `target` keeps every value it can take:
    the target holds the source's dtype, or the range the source is known to lie in."""
    if not (is_int_dtype(source.dtype) and is_int_dtype(target)):
        return False
    held = ranges.get(source.id, dtype_bounds(source.dtype))
    return _fits(held, target)


def lookup_index_inputs(graph: Graph) -> dict[int, tuple[int, int]]:
    """Integer inputs used as a lookup's index, with the range [0, rows - 1] they are
    assumed to lie in (the tightest over every lookup that uses them)."""
    assumed: dict[int, tuple[int, int]] = {}
    for node in graph.nodes.values():
        if node.op not in ("take", "take_along"):
            continue  # (a one-hot needs nothing assumed: an index out of range is a zero row)
        rows = graph.nodes[node.operands[0]].shape[int(node.attrs["dim"])]
        source = _unwrapped(graph, node.operands[1])
        if graph.nodes[source].op == "parameter" and is_int_dtype(graph.nodes[source].dtype):
            lo, hi = assumed.get(source, (0, rows - 1))
            assumed[source] = (lo, min(hi, rows - 1))
    return assumed


def _unwrapped(graph: Graph, node_id: int) -> int:
    """The index under reshapes, transposes, casts, `i - 0`, JAX's `i < 0 ? i + n : i`, and
    a guard that puts a constant in some places (`where(labels != ignore_index, labels, 0)`:
    the other places are looked up at the given index)."""
    while True:
        node = graph.nodes[node_id]
        if node.op in ROW_MAJOR_VIEWS or node.op in ("convert", "transpose"):
            if is_int_dtype(graph.nodes[node.operands[0]].dtype):
                node_id = node.operands[0]
                continue
        if node.op in ("add", "sub") and len(node.operands) == 2:  # x - 0: a block start of 0
            zero = _zero_fill_operand(graph, node)
            if zero is not None:
                node_id = node.operands[1 - zero]
                continue
        if node.op == "select":
            guarded = _constant_guarded(graph, node)
            if guarded is not None:
                node_id = guarded
                continue
            test, wrapped, plain = (graph.nodes[o] for o in node.operands)
            if (
                test.op == "compare"
                and test.attrs.get("direction") == "LT"
                and test.operands[0] == plain.id
                and wrapped.op == "add"
                and plain.id in wrapped.operands
            ):
                node_id = plain.id
                continue
        return node_id


def _zero_fill_operand(graph: Graph, node: Node) -> int | None:
    """Which operand of `x + 0`, `0 + x` or `x - 0` is the zero (an integer fill), or None."""
    from scalify.ir import is_zero_fill

    for k in (1,) if node.op == "sub" else (0, 1):
        other = graph.nodes[node.operands[1 - k]]
        if is_zero_fill(node.operands[k], graph.nodes) and other.shape == node.shape:
            return k
    return None


def _constant_guarded(graph: Graph, node: Node) -> int | None:
    """x for `select(test, x, c)` or `select(test, c, x)`, c an integer literal fill."""
    _, a, b = node.operands
    for value, other in ((a, b), (b, a)):
        fill = graph.nodes[other]
        if fill.op == "broadcast" and not fill.attrs.get("dims"):
            fill = graph.nodes[fill.operands[0]]
        if fill.op == "constant" and not fill.shape and is_int_dtype(fill.dtype):
            if graph.nodes[value].op != "constant":
                return value
    return None


def _folded(
    node: Node, nodes: dict[int, Node], ranges: dict[int, Range], truth: dict[int, bool]
) -> int | bool | None:
    """What the node folds to: an operand id it equals, a decided truth value, or None."""
    ops = node.operands
    if node.op == "compare" and len(ops) == 2:
        return decide_compare(
            node.attrs.get("direction", ""), ranges.get(ops[0]), ranges.get(ops[1])
        )
    if node.op == "select" and ops[0] in truth:
        return ops[1] if truth[ops[0]] else ops[2]
    if node.op in ("and", "or") and len(ops) == 2:
        absorbing = node.op == "or"  # true absorbs an or, false an and
        for mine, other in ((ops[0], ops[1]), (ops[1], ops[0])):
            if mine in truth and nodes[mine].shape == node.shape:
                if truth[mine] == absorbing:
                    return absorbing
                if nodes[other].shape == node.shape:
                    return other
    if node.op in ("min", "max") and len(ops) == 2:
        a, b = ranges.get(ops[0]), ranges.get(ops[1])
        if a is not None and b is not None:
            first, second = (a, b) if node.op == "min" else ((-b[1], -b[0]), (-a[1], -a[0]))
            if first[1] <= second[0] and nodes[ops[0]].shape == node.shape:
                return ops[0] if node.op == "min" else ops[1]
            if second[1] <= first[0] and nodes[ops[1]].shape == node.shape:
                return ops[1] if node.op == "min" else ops[0]
    if node.op == "clamp" and len(ops) == 3:
        low, x, high = (ranges.get(o) for o in ops)
        if low and x and high and low[1] <= x[0] and x[1] <= high[0]:
            return ops[1]
    if node.op == "reduce" and node.attrs.get("op") in ("and", "or") and ops[0] in truth:
        if len(ops) == 1 or ops[1] in truth:
            values = [truth[o] for o in ops]
            return all(values) if node.attrs["op"] == "and" else any(values)
    return None


def decide_compare(direction: str, a: Range | None, b: Range | None) -> bool | None:
    """The compare's result when every pair of values in the ranges gives the same one."""
    if a is None or b is None:
        return None
    always_less, never_less = a[1] < b[0], a[0] >= b[1]
    always_le, never_le = a[1] <= b[0], a[0] > b[1]
    table = {
        "LT": (always_less, never_less),
        "LE": (always_le, never_le),
        "GT": (never_le, always_le),
        "GE": (never_less, always_less),
        "EQ": (a[0] == a[1] == b[0] == b[1], always_less or never_le),
        "NE": (always_less or never_le, a[0] == a[1] == b[0] == b[1]),
    }
    if direction not in table:
        return None
    yes, no = table[direction]
    return True if yes else False if no else None


def _pred_constant(node: Node, value: bool, new_id: int) -> list[Node]:
    """Turn `node` into the constant `value` (a scalar, or a broadcast of one)."""
    literal = "true" if value else "false"
    if not node.shape:
        node.op, node.operands, node.attrs = "constant", (), {"value": literal}
        return []
    scalar = Node(new_id, "constant", (), (), "pred", {"value": literal}, node.loc, node.name)
    node.op, node.operands, node.attrs = "broadcast", (new_id,), {"dims": ()}
    return [scalar]


def _truth(node: Node, nodes: dict[int, Node], truth: dict[int, bool]) -> bool | None:
    if node.dtype != "pred":
        return None
    if node.op == "constant" and not node.shape:
        text = str(node.attrs.get("value", "")).lower()
        return {"true": True, "false": False}.get(text)
    if node.op in _UNARY_SAME and node.operands and node.operands[0] in truth:
        return truth[node.operands[0]]
    return None


def _range(
    node: Node,
    nodes: dict[int, Node],
    ranges: dict[int, Range],
    truth: dict[int, bool],
    partitions: int | None,
) -> Range | None:
    op, ops = node.op, node.operands
    if not is_int_dtype(node.dtype):
        return None
    # an operand without a narrower range may hold any value of its dtype
    got = [
        ranges.get(o) or (dtype_bounds(nodes[o].dtype) if is_int_dtype(nodes[o].dtype) else None)
        for o in ops
    ]
    if op == "constant" and all(n == 1 for n in node.shape):  # one value: `7` or `{7}`
        value = as_int(str(node.attrs.get("value")).strip("{} "))
        return None if value is None else (value, value)
    if op == "parameter":
        return node.attrs.get("assumed_range", dtype_bounds(node.dtype))
    if op == "rank_index":  # a device id: below the module's partition count when it says
        return (0, partitions - 1 if partitions else dtype_bounds(node.dtype)[1])
    if op == "iota":
        return (0, node.shape[int(node.attrs.get("dim", 0))] - 1)
    if op == "convert" and nodes[ops[0]].dtype == "pred":
        return (0, 1)
    if op in _UNARY_SAME or op in _MOVES or op == "convert":
        return got[0]
    if op == "select":
        if ops[0] in truth:
            return got[1] if truth[ops[0]] else got[2]
        if got[1] is None or got[2] is None:
            return None
        return (min(got[1][0], got[2][0]), max(got[1][1], got[2][1]))
    if op == "clamp":
        low, x, high = got
        if low is None or high is None or x is None:
            return None
        return (min(max(x[0], low[0]), high[0]), min(max(x[1], low[1]), high[1]))
    if None in got or not got:
        return None
    return _arithmetic(op, got)


def _narrowed(node: Node, value: Range, inside: tuple[int, Range] | None, ranges, nodes) -> Range:
    """A select's range when one branch is only taken where it lies in a known range."""
    if inside is None:
        return value
    branch, (lo, hi) = inside
    other = node.operands[2] if branch == node.operands[1] else node.operands[1]
    got = ranges.get(other) or dtype_bounds(nodes[other].dtype)
    return (max(value[0], min(lo, got[0])), min(value[1], max(hi, got[1])))


def _arithmetic(op: str, got: list[Range]) -> Range | None:
    if op == "neg":
        return (-got[0][1], -got[0][0])
    if len(got) != 2:
        return None
    (a0, a1), (b0, b1) = got
    if op == "add":
        return (a0 + b0, a1 + b1)
    if op == "sub":
        return (a0 - b1, a1 - b0)
    if op == "max":
        return (max(a0, b0), max(a1, b1))
    if op == "min":
        return (min(a0, b0), min(a1, b1))
    if op == "mul":
        products = [x * y for x in (a0, a1) for y in (b0, b1)]
        return None if any(math.isnan(p) for p in products) else (min(products), max(products))
    if op == "div" and a0 >= 0 and b0 == b1 and b0 > 0:  # truncating division
        return (a0 // b0, a1 // b0 if a1 != math.inf else math.inf)
    if op == "rem" and a0 >= 0 and b0 == b1 and b0 > 0:
        return (0, min(a1, b0 - 1))
    return None


def as_int(value) -> int | None:
    number = literal_number(value)
    return int(number) if number is not None and number.is_integer() else None


_INT_BITS = {"s8": 8, "s16": 16, "s32": 32, "s64": 64, "u8": 8, "u16": 16, "u32": 32, "u64": 64}


def is_int_dtype(dtype: str) -> bool:
    return dtype in _INT_BITS


def dtype_bounds(dtype: str) -> tuple[int, int]:
    bits = _INT_BITS[dtype]
    return (0, 2**bits - 1) if dtype.startswith("u") else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)


def _fits(value: Range, dtype: str) -> bool:
    """The whole range is representable: no wrap-around can have happened on the way."""
    lo, hi = dtype_bounds(dtype)
    return value[0] >= lo and value[1] <= hi
