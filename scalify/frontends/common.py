"""What every frontend does last: keep what the outputs reach, renumber ids densely."""

from __future__ import annotations

from scalify.ir import Node


def prune_and_renumber(
    nodes: list[Node], outputs: list[int]
) -> tuple[dict[int, Node], dict[int, int]]:
    """Nodes (in topological order, ids = positions) reachable from `outputs`, renumbered
    0..n-1 in the same order; returns them and the old-to-new id map."""
    live = bytearray(len(nodes))
    stack = list(outputs)
    while stack:
        n = stack.pop()
        if live[n]:
            continue
        live[n] = 1
        stack.extend(nodes[n].operands)
    remap: dict[int, int] = {}
    kept: dict[int, Node] = {}
    for node in nodes:
        if not live[node.id]:
            continue
        new_id = len(remap)
        remap[node.id] = new_id
        node.id = new_id
        node.operands = tuple(remap[o] for o in node.operands)
        kept[new_id] = node
    return kept, remap
