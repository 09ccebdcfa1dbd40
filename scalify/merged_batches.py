"""A batched product over a merged dim is the product over the two dims, merged after.

Megatron's attention folds batch and heads into one dim before its `baddbmm` and `bmm`
(`[sq, b, np, hn] -> [sq, b * np, hn]`) and splits them apart after. With the heads split
over tensor-parallel devices the merged dim is no block of the baseline's (each device holds
a block of heads inside every batch row), so no layout relates the two products; the heads
and the batch, kept apart, are related as usual. Each dot whose batch dim is a merge on both
sides (through a transpose, if one comes between) gets an equal form: the dot over the
unmerged operands with that batch dim as two, merged after. The split that follows it then
meets the merge (`split(merge(x)) == x`) and the product is the per-head one.
"""

from __future__ import annotations

from .ir import Graph, NewNodes, Node, place_after


def add_unmerged_batch_forms(graph: Graph) -> None:
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
