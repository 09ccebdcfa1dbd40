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
    for node in list(graph.nodes.values()):
        if node.op != "dot" or len(node.operands) != 2 or node.id in has_form:
            continue  # (a graph canonicalised again keeps its one form)
        made = NewNodes(node, next_id)
        form = _unmerged(graph, node, made)
        if form is None:
            continue
        for new in made.nodes:
            graph.nodes[new.id] = new
        next_id += len(made.nodes)
        placed[node.id] = [n.id for n in made.nodes]
        graph.equalities.append((node.id, form))
    place_after(graph, placed)


def _unmerged(graph: Graph, dot: Node, made: NewNodes) -> int | None:
    """The id of `merge(dot(unmerged operands))` equal to `dot`, built in `made`; None when
    no batch dim of the dot is a merge on both sides."""
    a = dot.attrs
    lhs_batch, rhs_batch = tuple(a.get("lhs_batch", ())), tuple(a.get("rhs_batch", ()))
    sides = [_peel(graph, graph.node(o)) for o in dot.operands]
    for k, (bl, br) in enumerate(zip(lhs_batch, rhs_batch, strict=True)):
        left, right = sides[0].get(bl), sides[1].get(br)
        if left is None or right is None or left[1] != right[1]:
            continue
        (lhs, inner), (rhs, _) = left, right
        lhs_id = _viewed(graph, made, graph.node(dot.operands[0]), lhs)
        rhs_id = _viewed(graph, made, graph.node(dot.operands[1]), rhs)
        attrs = dict(a)
        for key, at in (("lhs_batch", bl), ("lhs_contracting", bl), ("rhs_batch", br)):
            attrs[key] = _widened(tuple(a.get(key, ())), at)
        attrs["rhs_contracting"] = _widened(tuple(a.get("rhs_contracting", ())), br)
        outer = dot.shape[k] // inner
        shape = dot.shape[:k] + (outer, inner) + dot.shape[k + 1 :]
        product = made.add("dot", (lhs_id, rhs_id), shape, dot.dtype, attrs)
        return made.add("merge", (product,), dot.shape, dot.dtype, {"dim": k, "inner": inner})
    return None


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


def _peel(graph: Graph, operand: Node) -> dict[int, tuple[tuple, int]]:
    """For the operand's dim that is a merge of two dims (the operand a merge, or a
    transpose of one): that dim -> ((the merge's source, the transpose's permutation of the
    source's dims or None), the inner size)."""
    perm = None
    merge = operand
    if operand.op == "transpose":
        merge = graph.node(operand.operands[0])
        perm = tuple(operand.attrs["perm"])
    if merge.op != "merge":
        return {}
    p, inner = int(merge.attrs["dim"]), int(merge.attrs["inner"])
    source = merge.operands[0]
    if perm is None:
        return {p: ((source, None), inner)}
    expanded: list[int] = []
    for d in perm:  # the source's dims in the transposed order, the merged pair together
        expanded += [p, p + 1] if d == p else [d + 1 if d > p else d]
    return {perm.index(p): ((source, tuple(expanded)), inner)}


def _viewed(graph: Graph, made: NewNodes, operand: Node, peeled: tuple) -> int:
    """The unmerged operand: the merge's source, transposed as the operand was."""
    source, perm = peeled
    if perm is None:
        return source
    shape = tuple(graph.node(source).shape[d] for d in perm)
    return made.add("transpose", (source,), shape, operand.dtype, {"perm": perm})
