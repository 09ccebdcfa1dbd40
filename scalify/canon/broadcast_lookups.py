"""A lookup at indices broadcast along new dims is the broadcast of the lookup.

RoPE's tables are looked up at the positions, and positions the same for every row of the
batch are a broadcast of one count (`literal_arrays.py`). The lookup then carries the batch
size of its program (the local batch on a data-parallel device, the whole one in the
baseline), where the broadcast after it does not need to: written `broadcast(take(T, i))`,
the lookup is the same in both programs and only the broadcast differs in size, which a
broadcast's rules read as each device's block.
"""

from __future__ import annotations

from scalify.ir import Graph, Node


def lift_broadcast_indices(graph: Graph) -> None:
    """`take(T, broadcast(i))` along new index dims becomes `broadcast(take(T, i))`."""
    nodes: dict[int, Node] = {}
    next_id = max(graph.nodes, default=-1) + 1
    for node in graph.nodes.values():
        index = nodes.get(node.operands[1]) if node.op == "take" and node.operands else None
        if index is None or index.op != "broadcast" or not index.operands:
            nodes[node.id] = node
            continue
        inner = nodes[index.operands[0]]
        dims = tuple(index.attrs.get("dims", ()))
        if len(inner.shape) == len(index.shape) or len(dims) != len(inner.shape):
            nodes[node.id] = node
            continue
        rest = node.shape[len(index.shape) :]  # the table's dims that stay
        lookup = Node(
            next_id,
            "take",
            (node.operands[0], inner.id),
            tuple(inner.shape) + tuple(rest),
            node.dtype,
            dict(node.attrs),
            node.loc,
            f"{node.name}.unbroadcast",
            node.framework_op,
        )
        next_id += 1
        nodes[lookup.id] = lookup
        kept = tuple(dims) + tuple(len(index.shape) + k for k in range(len(rest)))
        node.op, node.operands, node.attrs = "broadcast", (lookup.id,), {"dims": kept}
        nodes[node.id] = node
    graph.nodes = nodes
