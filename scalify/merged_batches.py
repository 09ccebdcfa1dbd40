"""A batched product over a merged dim is the product over the two dims, merged after.

Megatron's attention folds batch and heads into one dim before its `baddbmm` and `bmm`
(`[sq, b, np, hn] -> [sq, b * np, hn]`) and splits them apart after. With the heads split
over tensor-parallel devices the merged dim is no block of the baseline's (each device holds
a block of heads inside every batch row), so no layout relates the two products; the heads
and the batch, kept apart, are related as usual. Each dot whose batch dim is a merge on both
sides (through a transpose, if one comes between) gets an equal form: the dot over the
unmerged operands with that batch dim as two, merged after. The split that follows it then
meets the merge (`split(merge(x)) == x`) and the product is the per-head one.

Autograd's backward of that attention goes further on the merged dim before splitting it:
the products' gradients are scaled, transposed, summed over other dims and broadcast back
while batch and heads are still one dim. Every such op commutes with the merge (an
elementwise op applies entry by entry, a transpose moves the merged dim as a whole, a
reduction or broadcast over other dims leaves it alone), so the region between a merge and
the split that undoes it is read on the two dims too: each op gets its unmerged twin, and
a view back to the twin's shape is equal to the twin (`split(op(merge(x))) == op'(x)`: a
row-major view is fixed by its shape). Only the twins that reach such a view are kept.
"""

from __future__ import annotations

from collections.abc import Callable

from .ir import ROW_MAJOR_VIEWS, Graph, NewNodes, Node, place_after
from .ops import ELEMENTWISE


def add_unmerged_batch_forms(graph: Graph, viewed: Viewer) -> None:
    next_id = max(graph.nodes, default=-1) + 1
    placed: dict[int, list[int]] = {}
    has_form = {a for a, b in graph.equalities if graph.nodes[b].op == "merge"}
    forms = _equal_forms(graph)
    for node in list(graph.nodes.values()):
        if node.op != "dot" or len(node.operands) != 2 or node.id in has_form:
            continue  # (a graph canonicalised again keeps its forms)
        made = NewNodes(node, next_id)
        for form in _unmerged(graph, node, made, forms):
            graph.equalities.append((node.id, form))
        if made.nodes:
            for new in made.nodes:
                graph.nodes[new.id] = new
            next_id += len(made.nodes)
            placed[node.id] = [n.id for n in made.nodes]
    place_after(graph, placed)
    add_split_region_forms(graph, viewed)


# ---- regions between a merge and its split


Reading = tuple[int, int, int]  # (merged dim p, inner size, the unmerged twin's id)
MAX_READINGS = 4  # of one node


# (a node to stand beside, the value, the shape, the next free id) -> the view's steps
Viewer = Callable[[Node, Node, tuple[int, ...], int], list[Node]]


def add_split_region_forms(graph: Graph, viewed: Viewer) -> None:
    """For each view of a merged dim back into its two, an equality with the unmerged twin
    of what it views (the module doc). A view is fixed by its shape: one to the twin's shape
    is the twin, and one that differs from it only in unit dims (a head dim of one entry put
    back beside another dim than the merge took it from) is the twin so viewed."""
    region = _MergedRegion(graph)
    exits: list[tuple[int, int]] = []
    for node in list(graph.nodes.values()):
        region.read(node)
        if node.op not in ROW_MAJOR_VIEWS or node.operands[0] not in region.readings:
            continue
        for _, _, twin in region.readings[node.operands[0]]:
            shape = region.node(twin).shape
            if shape == node.shape:
                exits.append((node.id, twin))
                break
            if _without_units(shape) != _without_units(node.shape):
                continue
            if shape.count(1) == node.shape.count(1):
                # the unit dims moved to where the view has them: a transpose, which keeps
                # a head dim of one entry (sharded in the baseline) a dim of its own
                exits.append((node.id, region.unit_dims_moved(node, twin)))
                break
            steps = viewed(node, region.node(twin), node.shape, region.next_id)
            if steps[-1].op in ROW_MAJOR_VIEWS:
                region.add_steps(steps, node.id)
                exits.append((node.id, steps[-1].id))
                break
    region.place([twin for _, twin in exits if twin in region.made])
    graph.equalities.extend(exits)


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
        elif node.op == "transpose" and node.operands[0] in self.readings:
            found = [self._transposed(node, r) for r in self.readings[node.operands[0]]]
        elif node.op in ELEMENTWISE and any(o in self.readings for o in node.operands):
            found = self._elementwise(node)
        elif node.op == "reduce" and node.operands[0] in self.readings:
            reduced = (self._reduced(node, r) for r in self.readings[node.operands[0]])
            found = [r for r in reduced if r is not None]
        elif node.op == "broadcast" and node.operands[0] in self.readings:
            found = [self._broadcast(node, r) for r in self.readings[node.operands[0]]]
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

    def unit_dims_moved(self, view: Node, twin: int) -> int:
        shape = self.node(twin).shape
        units = iter(d for d, n in enumerate(shape) if n == 1)
        others = iter(d for d, n in enumerate(shape) if n != 1)
        perm = tuple(next(units) if n == 1 else next(others) for n in view.shape)
        return self._add(view, "transpose", (twin,), view.shape, {"perm": perm})

    def add_steps(self, steps: list[Node], beside: int) -> None:
        for step in steps:
            self.made[step.id] = step
            self.after[step.id] = beside
        self.next_id = max(self.next_id, steps[-1].id + 1)

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
        """The op over the twins at one merged dim (the first reading of each operand that
        has it), its broadcast operands re-aimed; none where an operand has neither."""
        keys = [(p, inner) for p, inner, _ in self.readings.get(node.operands[0], ())]
        keys += [(p, k) for o in node.operands for p, k, _ in self.readings.get(o, ())]
        for p, inner in dict.fromkeys(keys):
            shape = _unmerged_shape(node.shape, p, inner)
            operands = [self._operand_at(node, o, p, inner, shape) for o in node.operands]
            if None not in operands:
                return [(p, inner, self._add(node, node.op, operands, shape, dict(node.attrs)))]
        return []

    def _operand_at(self, like: Node, o: int, p: int, inner: int, shape) -> int | None:
        for q, k, twin in self.readings.get(o, ()):
            if (q, k) == (p, inner):
                return twin
        operand = self.node(o)
        if operand.op != "broadcast":
            return None
        dims = tuple(operand.attrs["dims"])
        if p in dims:
            return None  # the broadcast operand has the merged dim itself
        moved = tuple(d + 1 if d > p else d for d in dims)
        return self._add(like, "broadcast", operand.operands, shape, {"dims": moved})

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


# Readings of one operand pair tried at most: an operand has its own reading and those of
# its equal forms (a reshape read merging from either end).
MAX_PAIRINGS = 4


def _unmerged(graph: Graph, dot: Node, made: NewNodes, forms) -> list[int]:
    """The ids of `merge(dot(unmerged operands))` equal to `dot`, built in `made`: one per
    pairing of the two operands' readings of their first batch dim that both read as a
    merge of the same inner size."""
    a = dot.attrs
    lhs_batch, rhs_batch = tuple(a.get("lhs_batch", ())), tuple(a.get("rhs_batch", ()))
    sides = [_peeled_forms(graph, graph.node(o), forms) for o in dot.operands]
    for k, (bl, br) in enumerate(zip(lhs_batch, rhs_batch, strict=True)):
        pairs = [
            (left, right)
            for left in sides[0].get(bl, ())
            for right in sides[1].get(br, ())
            if left[1] == right[1]
        ][:MAX_PAIRINGS]
        built = [_built(graph, dot, made, k, bl, br, left, right) for left, right in pairs]
        if built:
            return built
    return []


def _built(graph: Graph, dot: Node, made: NewNodes, k: int, bl: int, br: int, left, right) -> int:
    a = dot.attrs
    (lhs, inner), (rhs, _) = left, right
    lhs_id = _viewed(graph, made, graph.node(dot.operands[0]), lhs)
    rhs_id = _viewed(graph, made, graph.node(dot.operands[1]), rhs)
    attrs = dict(a)
    for key, at in (("lhs_batch", bl), ("lhs_contracting", bl), ("rhs_batch", br)):
        attrs[key] = _widened(tuple(a.get(key, ())), at)
    attrs["rhs_contracting"] = _widened(tuple(a.get("rhs_contracting", ())), br)
    shape = dot.shape[:k] + (dot.shape[k] // inner, inner) + dot.shape[k + 1 :]
    product = made.add("dot", (lhs_id, rhs_id), shape, dot.dtype, attrs)
    if inner == 1 and k + 2 < len(shape):  # the unit dim goes as the outer part of the next,
        # the way a later view that puts it back (a split at k + 1) takes it out
        merged = {"dim": k + 1, "inner": shape[k + 2]}
        return made.add("merge", (product,), dot.shape, dot.dtype, merged)
    return made.add("merge", (product,), dot.shape, dot.dtype, {"dim": k, "inner": inner})


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


def _peeled_forms(graph: Graph, operand: Node, forms) -> dict[int, list[tuple[tuple, int]]]:
    """`_peel` of the operand and of its equal forms (a reshape's finest reading is a merge
    where its first reading ends in a split): each batch-able dim -> its readings."""
    found: dict[int, list[tuple[tuple, int]]] = {}
    for candidate in [operand.id, *forms.get(operand.id, ())]:
        for dim, peeled in _peel(graph, graph.node(candidate), forms):
            if peeled not in found.setdefault(dim, []):
                found[dim].append(peeled)
    return found


def _equal_forms(graph: Graph) -> dict[int, list[int]]:
    forms: dict[int, list[int]] = {}
    for a, b in graph.equalities:
        forms.setdefault(a, []).append(b)
        forms.setdefault(b, []).append(a)
    return forms


def _peel(graph: Graph, operand: Node, forms) -> list[tuple[int, tuple[tuple, int]]]:
    """For each reading of the operand as a merge (the operand a merge, or a transpose of a
    merge or of a merge's equal form): (the operand's merged dim, ((the merge's source, the
    transpose's permutation of the source's dims or None), the inner size))."""
    if operand.op == "merge":
        return [(p, ((source, None), inner)) for p, source, inner in _as_merges(graph, operand)]
    if operand.op != "transpose":
        return []
    perm = tuple(operand.attrs["perm"])
    inner_id = operand.operands[0]
    readings = []
    for candidate in [inner_id, *forms.get(inner_id, ())]:
        for p, source, inner in _as_merges(graph, graph.node(candidate)):
            expanded: list[int] = []
            for d in perm:  # the source's dims in the transposed order, the pair together
                expanded += [p, p + 1] if d == p else [d + 1 if d > p else d]
            readings.append((perm.index(p), ((source, tuple(expanded)), inner)))
    return readings


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


def _viewed(graph: Graph, made: NewNodes, operand: Node, peeled: tuple) -> int:
    """The unmerged operand: the merge's source, transposed as the operand was."""
    source, perm = peeled
    if perm is None:
        return source
    shape = tuple(graph.node(source).shape[d] for d in perm)
    return made.add("transpose", (source,), shape, operand.dtype, {"perm": perm})
