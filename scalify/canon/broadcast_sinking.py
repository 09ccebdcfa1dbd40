"""Views of a broadcast move inside it: the broadcast reaches the elementwise op that reads it.

A broadcast's sizes are left out of its term only where its users are elementwise (see
"Terms carry no sizes" in docs/explanation/terms-and-layouts.md); there a batch split over
devices is a block of the broadcast. RoPE's table rows, broadcast over the batch and then
sliced, cast and reshaped before they multiply the queries, keep the batch size of their
program through those views, so a data-parallel device's rows never meet the baseline's. Written
`broadcast(view(x))` the views are the same in both programs, and the broadcast, now next to
the product, is each device's block of the baseline's.

Moved here: a split or merge of dims that come from x. A split that inserts a unit dim, or
a merge that drops a new one, changes only the broadcast's dims (a head dim of one entry per
device stays a new dim, as the baseline's broadcast to every head has it). A cast and a
slice that keeps the new dims whole move by canonical rules (`rules/canon.srl`:
`convert_of_broadcast`, `slice_of_broadcast`), as does a broadcast of a broadcast
(`broadcast_of_broadcast`), run again over the merge and split steps before this pass.
Python still: where the dims land after a split or merge is arithmetic over the operand's
sizes and the broadcast's dims with four cases, for which `.srl` has no function yet.
"""

from __future__ import annotations

from scalify.ir import Graph, Node


def sink_broadcasts(graph: Graph) -> None:
    nodes: dict[int, Node] = {}
    next_id = max(graph.nodes, default=-1) + 1
    for node in graph.nodes.values():
        source = nodes.get(node.operands[0]) if len(node.operands) == 1 else None
        moved = None
        if source is not None and source.op == "broadcast" and source.operands:
            inner = nodes[source.operands[0]]
            moved = _moved(node, source, inner)
        if moved is None:
            nodes[node.id] = node
            continue
        view_attrs, view_shape, dims = moved
        if view_attrs is None:  # only the broadcast's dims change
            operand = inner.id
        else:
            view = Node(
                next_id,
                node.op,
                (inner.id,),
                view_shape,
                node.dtype,
                view_attrs,
                node.loc,
                f"{node.name}.inside",
                node.framework_op,
            )
            next_id += 1
            nodes[view.id] = view
            operand = view.id
        node.op, node.operands, node.attrs = "broadcast", (operand,), {"dims": dims}
        nodes[node.id] = node
    graph.nodes = nodes


def _moved(node: Node, broadcast: Node, x: Node):
    """(the view's attributes on x, its shape, the broadcast dims of the result), or None
    when the op does not move inside; attributes None where only the dims change."""
    dims = tuple(broadcast.attrs.get("dims", ()))
    if len(dims) != len(x.shape):
        return None
    if node.op == "split":
        p, inner = int(node.attrs["dim"]), int(node.attrs["inner"])
        if p not in dims:
            return None
        k = dims.index(p)
        if inner == 1 or x.shape[k] == inner:  # a unit dim inserted: one more new dim
            at = p if inner == 1 else p + 1  # where x's dim lands
            return (
                None,
                None,
                tuple(d + (d > p) for d in dims[:k]) + (at,) + tuple(d + 1 for d in dims[k + 1 :]),
            )
        shape = x.shape[:k] + (x.shape[k] // inner, inner) + x.shape[k + 1 :]
        new = tuple(d + (d > p) for d in dims[:k]) + (p, p + 1)
        new += tuple(d + 1 for d in dims[k + 1 :])
        return {"dim": k, "inner": inner}, shape, new
    if node.op == "merge":
        p = int(node.attrs["dim"])
        for unit, kept in ((p, p + 1), (p + 1, p)):
            if unit not in dims and broadcast.shape[unit] == 1:  # a new unit dim dropped
                return None, None, tuple(p if d == kept else d - (d > p) for d in dims)
        if p not in dims or p + 1 not in dims:
            return None
        k = dims.index(p)
        shape = x.shape[:k] + (x.shape[k] * x.shape[k + 1],) + x.shape[k + 2 :]
        new = dims[:k] + (p,) + tuple(d - 1 for d in dims[k + 2 :])
        return {"dim": k, "inner": int(node.attrs.get("inner", x.shape[k + 1]))}, shape, new
    return None
