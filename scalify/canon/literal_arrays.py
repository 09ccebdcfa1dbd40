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

A value computed from literals and the device's id alone (XLA splits that scan across the
sequence devices: each counts its own positions from an offset it computes from
partition-id) is evaluated on every device. Where it is the device-0 value plus `k` times
the device's coordinate on one mesh axis (`c = (id / s) % n`, as `device_tables.py` reads
tables), it is that: a count `iota(m)` offset by `m * c` is the device's block of the count
over all n devices, `slice_at(iota(n * m), m * c)` (what `block_iotas.py` makes of the same
sum written out). Other device-dependent values keep the ops that compute them.
"""

from __future__ import annotations

import numpy as np

from scalify.externs.device_tables import MAX_DEVICES, coordinate_fit, fits_dtype
from scalify.externs.int_ranges import is_int_dtype
from scalify.ir import Graph, Node, computed_from_literals
from scalify.ops import COLLECTIVES
from scalify.simulate.kernels import apply
from scalify.values import NotSimulable

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
    per_device = _DeviceValues(graph, literal)
    evaluable |= per_device.evaluable
    for node in graph.nodes.values():
        if node.id not in evaluable:
            continue
        # the last integer values on their way: read by a float computation (a table
        # lookup at the positions) or by the parameters' side
        read_outside = any(u not in evaluable for u in users.get(node.id, ())) or (
            node.id in graph.outputs
        )
        if node.op in _PLAIN or not read_outside:
            continue
        try:
            if node.id in per_device.evaluable:
                form = per_device.form(node, next_id)
            else:
                form = _canonical_form(node, _value(graph, node, values), next_id)
        except (NotSimulable, ValueError, TypeError, IndexError, KeyError):
            continue
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


class _DeviceValues:
    """Values computed from literals and the device id (partition-id) alone, evaluated on
    every device of the module, and their forms (the module's docstring)."""

    def __init__(self, graph: Graph, literal: set[int]) -> None:
        self.graph = graph
        self.devices = graph.num_partitions or 0
        self.ids = [
            n.id
            for n in graph.nodes.values()
            if n.op == "rank_index" and n.attrs.get("kind") == "partition"
        ]
        self.evaluable: set[int] = set()
        self.values: list[dict[int, np.ndarray]] = []
        if not self.ids or not 2 <= self.devices <= MAX_DEVICES:
            return
        dependent = set(self.ids)
        for node in graph.nodes.values():
            if node.id in literal or node.id in dependent or node.op == "parameter":
                continue
            inputs = [o in literal or o in dependent for o in node.operands]
            if node.operands and all(inputs) and any(o in dependent for o in node.operands):
                dependent.add(node.id)
        self.evaluable = {i for i in dependent - set(self.ids) if _evaluable(graph.node(i))}
        self.values = [
            {pid: np.asarray(device) for pid in self.ids} for device in range(self.devices)
        ]

    def form(self, node: Node, next_id: int) -> list[Node] | None:
        if node.dtype == "pred" or not node.shape or node.op == "slice_at":
            return None  # (a scalar offset is the coordinate arithmetic the rules read; a
            # slice_at is this form already, in a graph canonicalised again)
        per = [_value(self.graph, node, values) for values in self.values]
        fit = coordinate_fit(per, self.devices)
        block = _count_from_zero(per[0])
        if fit is None or block is None or fit[1] != block[1]:
            return None  # other device-dependent values keep the ops that compute them
        (stride, count), _ = fit
        dim, m = block  # iota(m) + m * c: the device's block of iota(n * m)
        made = _Maker(node, next_id)
        pid = self.graph.node(self.ids[0])
        coord = made.add("div", (pid.id, made.scalar(stride, pid.dtype)), (), {}, pid.dtype)
        coord = made.add("rem", (coord, made.scalar(count, pid.dtype)), (), {}, pid.dtype)
        whole = made.add("iota", (), (count * m,), {"dim": 0})
        start = made.add("mul", (coord, made.scalar(m, pid.dtype)), (), {}, pid.dtype)
        attrs = {"dim": 0, "size": m, "parts": count}
        top = made.add("slice_at", (whole, start), (m,), attrs)
        if node.shape == (m,):  # the block itself, not an identity broadcast of it
            made.nodes[-1].id, made.nodes[-1].name = node.id, node.name
        else:
            made.last(top, (dim,))
        return made.nodes


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
        if is_int_dtype(node.dtype) and not fits_dtype(value, node.dtype):
            raise ValueError("wraps around")  # left to the simulator, which models it
        values[node.id] = value
    return values[node.id]


def _canonical_form(node: Node, value: np.ndarray, next_id: int) -> list[Node] | None:
    """New nodes ending in one with `node`'s id that compute `value`; None when it is no fill
    and no arithmetic count along one dim."""
    found = _along_one_dim(value)
    if found is None:
        return None
    varying, core = found
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


def _along_one_dim(value: np.ndarray) -> tuple[list[int], np.ndarray] | None:
    """(the dims along which `value` changes, at most one; its values along them), or None
    when it changes along several."""
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
    return varying, core


def _count_from_zero(value: np.ndarray) -> tuple[int, int] | None:
    """(dim, m) when `value` is `iota(m)` along one dim, broadcast along the others."""
    found = _along_one_dim(value)
    if found is None or len(found[0]) != 1:
        return None
    (dim,), core = found
    return (dim, len(core)) if np.array_equal(core, np.arange(len(core))) else None


class _Maker:
    """Builds the canonical nodes for one replaced node, the last one taking its id."""

    def __init__(self, node: Node, next_id: int) -> None:
        self.node, self.next_id, self.nodes = node, next_id, []

    def add(
        self,
        op: str,
        operands: tuple[int, ...],
        shape: tuple[int, ...],
        attrs: dict,
        dtype: str | None = None,
    ) -> int:
        n = self.node
        made = Node(
            self.next_id,
            op,
            operands,
            shape,
            dtype or n.dtype,
            attrs,
            n.loc,
            f"{n.name}.{op}",
            n.framework_op,
        )
        self.next_id += 1
        self.nodes.append(made)
        return made.id

    def scalar(self, value, dtype: str | None = None) -> int:
        dtype = dtype or self.node.dtype
        text = ("true" if value else "false") if dtype == "pred" else str(int(value))
        return self.add("constant", (), (), {"value": text}, dtype)

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
