"""Unit-dim reshapes (a `keepdims=True` reduction, a squeeze) moved through the ops between
them, as alternative forms, derived from a graph as it is proved (`with_unit_alternatives`).

`m = max(s, keepdims=True)` puts a split with a size-1 inner dim right after the reduction,
and the ops that follow (`exp(m - g)`, an all-reduce of it) run on the 3-D value until a merge
takes the unit dim away again. Rules match the value without the unit dim, so for each such
merge (or split) over an elementwise op or an all-reduce, the same op over the merged
operands enters the graph as an equal form (graph.equalities): a reshape of a size-1 dim
commutes with elementwise ops and with collectives, which act element by element.
"""

from __future__ import annotations

from dataclasses import replace

from scalify.ir import Graph, Node, place_after
from scalify.ops import COLLECTIVES, ELEMENTWISE

DEPTH = 4  # how many ops a unit-dim reshape is moved through


def with_unit_alternatives(graph: Graph) -> Graph:
    """A copy of `graph` holding the alternative forms. They are derived when a graph is
    proved, never stored in it: a form copies the computation it moves through, so it must
    be made from the graph exactly as it stands (a mutated or cut graph included)."""
    copy = replace(graph, nodes=dict(graph.nodes), equalities=list(graph.equalities), derived={})
    sink_unit_reshapes(copy, max(copy.nodes, default=-1) + 1)
    return copy


def sink_unit_reshapes(graph: Graph, next_id: int) -> int:
    """Add the alternative forms, each placed right after the reshape it equals (so graph
    order stays topological and layer cuts stay where they were); returns the next free id."""
    placed: dict[int, list[int]] = {}
    for node in list(graph.nodes.values()):
        if _unit_reshape(node):
            first = next_id
            alternative, next_id = _through(graph, node, graph.node(node.operands[0]), next_id, 0)
            if alternative is not None:
                graph.equalities.append((node.id, alternative))
                placed[node.id] = list(range(first, next_id))
    place_after(graph, placed)
    return next_id


def _unit_reshape(node: Node) -> bool:
    return node.op in ("merge", "split") and node.attrs.get("inner") == 1


def _through(
    graph: Graph, reshape: Node, operand: Node, next_id: int, depth: int
) -> tuple[int | None, int]:
    """`reshape(op(a, b))` as `op(reshape(a), reshape(b))`: the new node's id, or None."""
    movable = operand.op in ELEMENTWISE or (
        operand.op in COLLECTIVES and operand.op in ("all_reduce",)
    )
    if depth >= DEPTH or not movable:
        return None, next_id
    if any(graph.node(o).shape != operand.shape for o in operand.operands):
        return None, next_id
    moved = []
    for o in operand.operands:
        inner = graph.node(o)
        deeper, next_id = _through(graph, reshape, inner, next_id, depth + 1)
        kept = _kept_through(reshape, inner) if deeper is None else None
        if kept is not None:
            # a broadcast: broadcast to the new shape instead (the old one keeps only
            # elementwise users, so its term may stay size-free)
            attrs = {**inner.attrs, "dims": kept}
            deeper, next_id = _add(
                graph, inner, "broadcast", inner.operands, next_id, attrs, reshape.shape
            )
        if deeper is None:
            deeper, next_id = _add(
                graph, reshape, reshape.op, (o,), next_id, reshape.attrs, dtype=inner.dtype
            )
        moved.append(deeper)
    return _add(graph, operand, operand.op, tuple(moved), next_id, operand.attrs, reshape.shape)


def _kept_dims_through(reshape: Node, dims: tuple[int, ...]) -> tuple[int, ...] | None:
    """A broadcast's kept dims after a unit-dim reshape (a split inserts the unit dim after
    `dim`, a merge removes it); None when the merged unit dim is one the broadcast keeps."""
    k = reshape.attrs["dim"]
    if reshape.op == "split":
        return tuple(j if j <= k else j + 1 for j in dims)
    if k + 1 in dims:
        return None
    return tuple(j if j <= k else j - 1 for j in dims)


def _kept_through(reshape: Node, operand: Node) -> tuple[int, ...] | None:
    if operand.op != "broadcast":
        return None
    return _kept_dims_through(reshape, tuple(operand.attrs.get("dims", ())))


def _add(
    graph: Graph,
    like: Node,
    op: str,
    operands: tuple[int, ...],
    next_id: int,
    attrs: dict,
    shape: tuple[int, ...] | None = None,
    dtype: str | None = None,
) -> tuple[int, int]:
    shape = like.shape if shape is None else shape
    graph.nodes[next_id] = like.derived(
        next_id, op, operands, shape, attrs, f"{like.name}.unit", dtype or ""
    )
    return next_id, next_id + 1
