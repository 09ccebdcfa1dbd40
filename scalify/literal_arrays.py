"""An integer value computed from literals alone is its value, written in one canonical form.

Library code computes positions, segment ids and masks from constants at each program's own
sizes: EasyDeL's positions come out of a scan over an all-ones mask of the local batch, which
XLA unrolls into hundreds of ops. Each device's program and the baseline then compute the
same count `0 .. S-1` for every row, one over the local batch and one over the whole, along
paths of different shapes that no rule relates. Their values are plain: each is evaluated
(exactly: integers and predicates only, with the simulator's kernels) and written as the
count or fill it is, broadcast over the dims along which it does not change:
`broadcast(a + b * iota(n))` or `broadcast(c)`. Those forms carry no batch size, so a
device's rows are its block of the baseline's as any broadcast's are.

A value that is not a fill or an arithmetic count along one dim (a causal mask) keeps the
ops that compute it.
"""

from __future__ import annotations

import numpy as np

from .int_ranges import is_int_dtype
from .ir import Graph, Node
from .ops import COLLECTIVES
from .partition import computed_from_literals
from .simulate.kernels import NotSimulable, apply

# Larger literal values are left as computed: evaluating them costs what the proof saves.
MAX_ELEMENTS = 1 << 16
# Already in a canonical form (or cheaper to keep than to rewrite).
_PLAIN = frozenset({"constant", "iota", "broadcast"})


def fold_literal_arrays(graph: Graph) -> None:
    """Each integer or predicate value computed from literals only and read by a computed
    value is replaced by its canonical form (see the module's docstring)."""
    literal = computed_from_literals(graph)  # not the memo: the graph is still being rewritten
    users = graph.users()
    values: dict[int, np.ndarray] = {}
    replaced: dict[int, list[Node]] = {}
    next_id = max(graph.nodes, default=-1) + 1
    evaluable = {n.id for n in graph.nodes.values() if n.id in literal and _evaluable(n)}
    for node in graph.nodes.values():
        if node.id not in evaluable:
            continue
        try:
            value = _value(graph, node, values)
        except (NotSimulable, ValueError, TypeError, IndexError, KeyError):
            continue
        # the last integer values on their way: read by a float computation (a table
        # lookup at the positions) or by the parameters' side
        read_outside = any(u not in evaluable for u in users.get(node.id, ())) or (
            node.id in graph.outputs
        )
        if node.op in _PLAIN or not read_outside:
            continue
        form = _canonical_form(node, value, next_id)
        if form is not None:
            next_id += len(form)
            replaced[node.id] = form
    if replaced:
        _substitute(graph, replaced)
        graph.derived.clear()


def _evaluable(node: Node) -> bool:
    return (
        node.op not in COLLECTIVES
        and node.op != "rank_index"
        and (is_int_dtype(node.dtype) or node.dtype == "pred")
        and int(np.prod(node.shape, dtype=np.int64)) <= MAX_ELEMENTS
    )


def _value(graph: Graph, node: Node, values: dict[int, np.ndarray]) -> np.ndarray:
    """The node's value, from its operands' (all literal, evaluated first in graph order)."""
    if node.id not in values:
        args = [
            values[o] if o in values else _value(graph, graph.node(o), values)
            for o in node.operands
        ]
        value = np.asarray(apply(node, args, [graph.node(o).dtype for o in node.operands])).reshape(
            node.shape
        )
        if is_int_dtype(node.dtype) and not _fits(value, node.dtype):
            raise ValueError("wraps around")  # left to the simulator, which models it
        values[node.id] = value
    return values[node.id]


def _fits(value: np.ndarray, dtype: str) -> bool:
    """Whether every entry lies in the integer dtype's range (the kernels compute in int64)."""
    kind = {"s": "int", "u": "uint"}.get(dtype[:1])
    if kind is None or not dtype[1:].isdigit():
        return False
    info = np.iinfo(f"{kind}{dtype[1:]}")
    return value.size == 0 or (int(value.min()) >= info.min and int(value.max()) <= info.max)


def _canonical_form(node: Node, value: np.ndarray, next_id: int) -> list[Node] | None:
    """New nodes ending in one with `node`'s id that compute `value`; None when it is no fill
    and no arithmetic count along one dim."""
    varying = [
        d
        for d in range(value.ndim)
        if not np.array_equal(value, np.take(value, [0], axis=d).repeat(value.shape[d], axis=d))
    ]
    if len(varying) > 1:
        return None
    core = value
    for d in reversed(range(value.ndim)):
        if d not in varying:
            core = np.take(core, 0, axis=d)
    made = _Maker(node, next_id)
    if core.ndim == 0:
        top = made.scalar(core.item())
    else:
        steps = np.diff(core.astype(np.int64))
        if node.dtype == "pred" or len(set(steps.tolist())) > 1:
            return None
        start, step = int(core[0]), int(steps[0]) if len(steps) else 0
        top = made.count(len(core), start, step)
    made.last(top, tuple(varying))
    return made.nodes


class _Maker:
    """Builds the canonical nodes for one replaced node, the last one taking its id."""

    def __init__(self, node: Node, next_id: int) -> None:
        self.node, self.next_id, self.nodes = node, next_id, []

    def add(self, op: str, operands: tuple[int, ...], shape: tuple[int, ...], attrs: dict) -> int:
        n = self.node
        made = Node(
            self.next_id,
            op,
            operands,
            shape,
            n.dtype,
            attrs,
            n.loc,
            f"{n.name}.{op}",
            n.framework_op,
        )
        self.next_id += 1
        self.nodes.append(made)
        return made.id

    def scalar(self, value) -> int:
        text = ("true" if value else "false") if self.node.dtype == "pred" else str(int(value))
        return self.add("constant", (), (), {"value": text})

    def count(self, n: int, start: int, step: int) -> int:
        """start + step * iota(n)."""
        top = self.add("iota", (), (n,), {"dim": 0})
        if step != 1:
            scale = self.add("broadcast", (self.scalar(step),), (n,), {"dims": ()})
            top = self.add("mul", (top, scale), (n,), {})
        if start != 0:
            offset = self.add("broadcast", (self.scalar(start),), (n,), {"dims": ()})
            top = self.add("add", (top, offset), (n,), {})
        return top

    def last(self, top: int, dims: tuple[int, ...]) -> None:
        """The broadcast of `top` to the node's shape along `dims`, under the node's id."""
        n = self.node
        self.nodes.append(
            Node(
                n.id,
                "broadcast",
                (top,),
                n.shape,
                n.dtype,
                {"dims": dims},
                n.loc,
                n.name,
                n.framework_op,
            )
        )


def _substitute(graph: Graph, replaced: dict[int, list[Node]]) -> None:
    nodes: dict[int, Node] = {}
    for node_id, node in graph.nodes.items():
        for made in replaced.get(node_id, [node]):
            nodes[made.id] = made
    graph.nodes = nodes
