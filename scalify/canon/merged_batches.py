"""Batch and heads merged into one dim, read as the two dims they are.

Megatron's attention folds batch and heads into one dim before its `baddbmm` and `bmm`
(`[sq, b, np, hn] -> [sq, b * np, hn]`) and splits them apart after; autograd's backward of
it goes further on the merged dim before splitting it (the products' gradients scaled,
transposed, summed over other dims, broadcast back). With the heads split over
tensor-parallel devices the merged dim is no block of the baseline's (each device holds a
block of heads inside every batch row), so no layout relates those values. Every op on the
way commutes with the merge: a batched product whose batch dim is a merge on both sides is
the product over the two dims, merged after; an elementwise op applies entry by entry; a
transpose moves the merged dim as a whole; a reduction or broadcast over other dims leaves
it alone. So the region between a merge and the view that undoes it is read on the two
dims: each op gets its unmerged twin, and a view back to the twin's shape is equal to the
twin (`split(op(merge(x))) == op'(x)`: a row-major view is fixed by its shape). A dim
merged twice, `(b g) r` (grouped-query attention's KV heads repeated), is also read as
`b (g r)`, the pair the queries' merge makes. Only the twins that reach such a view are
kept.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

from scalify.ir import ROW_MAJOR_VIEWS, Graph, NewNodes, Node, place_after
from scalify.ops import ELEMENTWISE

Reading = tuple[int, int, int]  # (merged dim p, inner size, the unmerged twin's id)
MAX_READINGS = 4  # of one node

# (a node to stand beside, the value, the shape, the next free id) -> the view's steps
Viewer = Callable[[Node, Node, tuple[int, ...], int], list[Node]]


def add_unmerged_batch_forms(graph: Graph, viewed: Viewer) -> None:
    """For each view of a merged dim back into its two, an equality with the unmerged twin
    of what it views. A view to the twin's shape is the twin; one that differs from it only
    in unit dims (a head dim of one entry put back beside another dim than the merge took
    it from) is the twin so viewed."""
    done = {a for a, b in graph.equalities if graph.nodes[b].name.endswith(_SUFFIXES)}
    region = _MergedRegion(graph)
    exits: list[tuple[int, int]] = []
    for node in list(graph.nodes.values()):
        region.read(node)
        if node.op not in ROW_MAJOR_VIEWS or node.id in done:
            continue  # (a graph canonicalised again keeps its forms)
        for _, _, twin in region.readings.get(node.operands[0], ()):
            # every reading: which of them the other program's meets is the proof's to find
            form = region.viewed_as(node, twin, viewed)
            if form is not None:
                exits.append((node.id, form))
    region.place([twin for _, twin in exits if twin in region.made])
    graph.equalities.extend(exits)


_SUFFIXES = (".unmerged", ".viewed")


def _without_units(shape) -> list[int]:
    return [n for n in shape if n != 1]


class _MergedRegion:
    """The unmerged twins of the ops downstream of merges, made as the graph is read in
    order; `place` puts the ones an exit needs into the graph."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.next_id = max(graph.nodes, default=-1) + 1
        self.readings: dict[int, list[Reading]] = {}
        self.made: dict[int, Node] = {}
        self.after: dict[int, int] = {}  # twin -> the node it is the twin of
        self.equal_to: dict[int, list[int]] = {}  # an equal form -> the nodes it equals
        for a, b in graph.equalities:
            self.equal_to.setdefault(b, []).append(a)

    def node(self, i: int) -> Node:
        return self.made[i] if i in self.made else self.graph.nodes[i]

    def read(self, node: Node) -> None:
        found: list[Reading] = []
        if node.op == "merge":
            found = [(p, inner, source) for p, source, inner in _as_merges(self.graph, node)]
            found += self._merged_again(node)
        elif node.op == "transpose" and node.operands[0] in self.readings:
            found = [self._transposed(node, r) for r in self.readings[node.operands[0]]]
        elif node.op in ELEMENTWISE and any(o in self.readings for o in node.operands):
            found = self._elementwise(node)
        elif node.op == "reduce" and node.operands[0] in self.readings:
            reduced = (self._reduced(node, r) for r in self.readings[node.operands[0]])
            found = [r for r in reduced if r is not None]
        elif node.op == "broadcast" and node.operands[0] in self.readings:
            found = [self._broadcast(node, r) for r in self.readings[node.operands[0]]]
        elif node.op == "dot" and all(o in self.readings for o in node.operands):
            found = self._product(node)
        if not found:
            return
        for i in (node.id, *self.equal_to.get(node.id, ())):  # a product's merged form
            # reads its product so
            known = self.readings.setdefault(i, [])
            known.extend(r for r in found if len(known) < MAX_READINGS)

    def _add(self, like: Node, op: str, operands, shape, attrs) -> int:
        made = NewNodes(like, self.next_id)
        twin = made.add(op, tuple(operands), tuple(shape), like.dtype, attrs)
        made.nodes[0].name = f"{like.name}.unmerged"
        self.made[twin] = made.nodes[0]
        self.after[twin] = like.id
        self.next_id += 1
        return twin

    def viewed_as(self, view: Node, twin: int, viewed: Viewer) -> int | None:
        """The twin as `view` has it: itself, its unit dims moved, or viewed; None when the
        two shapes differ in more than unit dims."""
        shape = self.node(twin).shape
        if shape == view.shape:
            return twin
        if _without_units(shape) != _without_units(view.shape):
            return None
        if shape.count(1) == view.shape.count(1):
            # the unit dims moved to where the view has them: a transpose, which keeps a
            # head dim of one entry (sharded in the baseline) a dim of its own
            return self._unit_dims_moved(view, twin)
        steps = viewed(view, self.node(twin), view.shape, self.next_id)
        if steps[-1].op not in ("merge", "split"):
            return None  # (a reshape that has no steps stays out of the e-graph's terms)
        for step in steps:
            self.made[step.id] = step
            self.after[step.id] = view.id
        self.next_id = max(self.next_id, steps[-1].id + 1)
        return steps[-1].id

    def _unit_dims_moved(self, view: Node, twin: int) -> int:
        shape = self.node(twin).shape
        units = iter(d for d, n in enumerate(shape) if n == 1)
        others = iter(d for d, n in enumerate(shape) if n != 1)
        perm = tuple(next(units) if n == 1 else next(others) for n in view.shape)
        return self._add(view, "transpose", (twin,), view.shape, {"perm": perm})

    def _product(self, dot: Node) -> list[Reading]:
        """The product over the twins of its operands, for the first batch dim both read as
        a merge of the same inner size (of at most MAX_READINGS pairings)."""
        a = dot.attrs
        lhs_batch, rhs_batch = tuple(a.get("lhs_batch", ())), tuple(a.get("rhs_batch", ()))
        lhs, rhs = (self.readings[o] for o in dot.operands)
        for k, (bl, br) in enumerate(zip(lhs_batch, rhs_batch, strict=True)):
            pairs = [
                (inner, left, right)
                for p, inner, left in lhs
                for q, other, right in rhs
                if (p, q) == (bl, br) and inner == other
            ]
            found = []
            for inner, left, right in pairs[:MAX_READINGS]:
                attrs = dict(a)
                for key, at in (("lhs_batch", bl), ("lhs_contracting", bl), ("rhs_batch", br)):
                    attrs[key] = _widened(tuple(a.get(key, ())), at)
                attrs["rhs_contracting"] = _widened(tuple(a.get("rhs_contracting", ())), br)
                shape = _unmerged_shape(dot.shape, k, inner)
                found.append((k, inner, self._add(dot, "dot", (left, right), shape, attrs)))
            if found:
                return found
        return []

    def _merged_again(self, node: Node) -> list[Reading]:
        """`merge(x)` over a dim that is itself a merge, `(b g) r` (grouped-query attention's
        KV heads repeated, then merged with the batch): also read as `b (g r)`, the pair the
        queries' merge of batch and heads makes."""
        p, inner = int(node.attrs["dim"]), int(node.attrs["inner"])
        found = []
        for q, outer_inner, twin in self.readings.get(node.operands[0], ()):
            if q == p:
                shape = _unmerged_shape(node.shape, p, outer_inner * inner)
                attrs = {"dim": p + 1, "inner": inner}
                found.append(
                    (p, outer_inner * inner, self._add(node, "merge", (twin,), shape, attrs))
                )
        return found

    def _transposed(self, node: Node, reading: Reading) -> Reading:
        p, inner, source = reading
        perm = tuple(node.attrs["perm"])
        expanded: list[int] = []
        for d in perm:  # the source's dims in the transposed order, the pair together
            expanded += [p, p + 1] if d == p else [d + 1 if d > p else d]
        q = perm.index(p)
        shape = _unmerged_shape(node.shape, q, inner)
        return q, inner, self._add(node, "transpose", (source,), shape, {"perm": tuple(expanded)})

    def _elementwise(self, node: Node) -> list[Reading]:
        """The op over its operands' twins at one merged dim (each operand's readings at it,
        or a broadcast operand re-aimed), for the first dim all operands have; at most
        MAX_READINGS combinations."""
        keys = [(p, k) for o in node.operands for p, k, _ in self.readings.get(o, ())]
        for p, inner in dict.fromkeys(keys):
            shape = _unmerged_shape(node.shape, p, inner)
            choices = [self._operands_at(node, o, p, inner, shape) for o in node.operands]
            if all(choices):
                combos = itertools.islice(itertools.product(*choices), MAX_READINGS)
                attrs = dict(node.attrs)
                return [(p, inner, self._add(node, node.op, c, shape, attrs)) for c in combos]
        return []

    def _operands_at(self, like: Node, o: int, p: int, inner: int, shape) -> list[int]:
        twins = [twin for q, k, twin in self.readings.get(o, ()) if (q, k) == (p, inner)]
        operand = self.node(o)
        if twins or operand.op != "broadcast":
            return twins
        dims = tuple(operand.attrs["dims"])
        if p in dims:
            return []  # the broadcast operand has the merged dim itself
        moved = tuple(d + 1 if d > p else d for d in dims)
        return [self._add(like, "broadcast", operand.operands, shape, {"dims": moved})]

    def _reduced(self, node: Node, reading: Reading) -> Reading | None:
        p, inner, source = reading
        dims = tuple(node.attrs["dims"])
        if p in dims:
            return None
        moved = tuple(d + 1 if d > p else d for d in dims)
        q = p - sum(1 for d in dims if d < p)
        shape = _unmerged_shape(node.shape, q, inner)
        attrs = {**node.attrs, "dims": moved}
        return q, inner, self._add(node, "reduce", (source,), shape, attrs)

    def _broadcast(self, node: Node, reading: Reading) -> Reading:
        p, inner, source = reading
        dims = tuple(node.attrs["dims"])
        q = dims[p]
        moved: list[int] = []
        for k, d in enumerate(dims):
            out = d + 1 if d > q else d
            moved += [out, out + 1] if k == p else [out]
        shape = _unmerged_shape(node.shape, q, inner)
        return q, inner, self._add(node, "broadcast", (source,), shape, {"dims": tuple(moved)})

    def place(self, exits: list[int]) -> None:
        """Put the twins the exits need (and what they need) into the graph, each beside
        the node it is the twin of."""
        needed: set[int] = set()
        stack = list(exits)
        while stack:
            i = stack.pop()
            if i in self.made and i not in needed:
                needed.add(i)
                stack.extend(self.made[i].operands)
        placed: dict[int, list[int]] = {}
        for i in sorted(needed):
            self.graph.nodes[i] = self.made[i]
            placed.setdefault(self.after[i], []).append(i)
        place_after(self.graph, placed)


def _unmerged_shape(shape, p: int, inner: int) -> tuple[int, ...]:
    return (*shape[:p], shape[p] // inner, inner, *shape[p + 1 :])


def _widened(dims: tuple[int, ...], at: int) -> tuple[int, ...]:
    """Dims of an operand whose dim `at` became two (at, at + 1): `at` itself, if listed,
    becomes both."""
    result: list[int] = []
    for d in dims:
        if d == at:
            result += [at, at + 1]
        else:
            result.append(d + 1 if d > at else d)
    return tuple(result)


def _as_merges(graph: Graph, node: Node) -> list[tuple[int, int, int]]:
    """The node read as `merge(source, p, inner)`: (p, source, inner) for each reading."""
    if node.op != "merge":
        return []
    p, inner, source = int(node.attrs["dim"]), int(node.attrs["inner"]), node.operands[0]
    readings = [(p, source, inner)]
    if p > 0 and graph.node(source).shape[p] == 1:
        # a unit dim dropped (one head per device): the dim before it merged with it
        readings.append((p - 1, source, 1))
    return readings
