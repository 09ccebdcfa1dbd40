"""Framework-independent clean-ups of the IR that every frontend's output goes through.

Lowerings wrap values in steps that compute nothing (a reshape to the same shape, a
broadcast onto the same dims, reshape chains): removing them here keeps rules free of such
noise. Every rewrite is an identity, so the graph's meaning is unchanged.
"""

from __future__ import annotations

from .ir import Graph, Node


def _is_identity(node: Node, operand: Node) -> bool:
    if node.op in ("reshape", "convert", "copy") and node.shape == operand.shape:
        return node.op != "convert" or node.dtype == operand.dtype
    if node.op == "broadcast":
        return node.shape == operand.shape and tuple(node.attrs["dims"]) == tuple(
            range(len(node.shape))
        )
    if node.op == "transpose":
        return tuple(node.attrs["perm"]) == tuple(range(len(node.shape)))
    return False


def canonicalize(graph: Graph) -> Graph:
    """Drop identity ops, fold reshape chains, and prune what no output uses."""
    alias: dict[int, int] = {}
    nodes: dict[int, Node] = {}
    for node in graph.nodes.values():
        operands = tuple(alias.get(o, o) for o in node.operands)
        node.operands = operands
        if len(operands) == 1 and _is_identity(node, nodes[operands[0]]):
            alias[node.id] = operands[0]
            continue
        if node.op == "reshape" and nodes[operands[0]].op == "reshape":
            node.operands = nodes[operands[0]].operands
            if node.shape == nodes[node.operands[0]].shape:
                alias[node.id] = node.operands[0]
                continue
        nodes[node.id] = node
    outputs = [alias.get(o, o) for o in graph.outputs]
    live = set(outputs) | set(graph.inputs)
    for node in reversed(list(nodes.values())):
        if node.id in live:
            live.update(node.operands)
    graph.nodes = {i: n for i, n in nodes.items() if i in live}
    graph.output_shardings = {alias.get(k, k): v for k, v in graph.output_shardings.items()}
    graph.outputs = outputs
    return graph
