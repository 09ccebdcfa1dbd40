"""Reshape round trips through elementwise ops, folded away.

Lowerings add and drop size-1 dims around elementwise code: JAX's `take_along_axis` checks
its indices' bounds on a copy viewed with an index-vector dim of one entry, then reduces
that dim away; on a device that holds one group of a vmapped computation it also views the
group dim (of one entry) away and back. `view(f(view'(x), fill))`, where `view` undoes
`view'`, is `f(x, fill)`: row-major reshapes compose to a reshape, and a reshape to the
same shape is the identity. Folding it makes both graphs compute the check the same way,
whatever sizes their dims have. A reduction over one dim of one entry reduces nothing and
counts as a reshape here.

Only whole round trips fold: every leaf of the elementwise tree is a view of a value of
the outer view's shape, or a scalar fill. Nothing else moves, so the graph stays as the
user wrote it everywhere else.
"""

from __future__ import annotations

from dataclasses import replace

from .ir import ELEMENTWISE_BINARY, ELEMENTWISE_UNARY, Graph, Node

ELEMENTWISE = ELEMENTWISE_UNARY | ELEMENTWISE_BINARY | {"select", "clamp"}
VIEWS = ("merge", "split", "reshape")
DEPTH = 6  # how many elementwise ops deep a round trip is looked for


def fold_reshape_round_trips(graph: Graph) -> None:
    """Replace each view (or reduction over a unit dim) whose operand is such a round trip
    by the elementwise ops applied to the unviewed values."""
    alias: dict[int, int] = {}
    nodes: dict[int, Node] = {}
    next_id = max(graph.nodes, default=-1) + 1
    for node in graph.nodes.values():
        node.operands = tuple(alias.get(o, o) for o in node.operands)
        nodes[node.id] = node
        if not _is_view(node, nodes):
            continue
        new = _Copies(next_id)
        folded = _unview(nodes[node.operands[0]], node.shape, nodes, new, 0)
        if folded is None or not new.nodes:
            continue
        next_id += len(new.nodes)
        del nodes[node.id]
        nodes.update({n.id: n for n in new.nodes})
        nodes[node.id] = node  # kept after the new nodes (other passes may still hold it)
        alias[node.id] = folded
    graph.nodes = nodes
    graph.outputs = [alias.get(o, o) for o in graph.outputs]
    graph.equalities = [(alias.get(a, a), alias.get(b, b)) for a, b in graph.equalities]
    graph.output_shardings = {alias.get(k, k): v for k, v in graph.output_shardings.items()}


class _Copies:
    """The ops of a round trip made again at the outer shape, each where its original is in
    the user's code (its location and name), so that a report points at the same lines."""

    def __init__(self, next_id: int) -> None:
        self.next_id = next_id
        self.nodes: list[Node] = []

    def add(self, like: Node, operands: tuple[int, ...], shape: tuple[int, ...]) -> int:
        attrs = dict(like.attrs)
        copy = replace(like, id=self.next_id + len(self.nodes), operands=operands, shape=shape)
        copy.attrs = attrs
        self.nodes.append(copy)
        return copy.id


def _is_view(node: Node, nodes: dict[int, Node]) -> bool:
    if node.op in VIEWS:
        return True
    if node.op != "reduce" or len(node.operands) != 1:
        return False
    dims = tuple(node.attrs.get("dims", ()))
    return len(dims) == 1 and nodes[node.operands[0]].shape[dims[0]] == 1


def _unview(
    node: Node, shape: tuple[int, ...], nodes: dict[int, Node], new: _Copies, depth: int
) -> int | None:
    """`node` seen at `shape` without a view: the id of a value equal to `reshape(node,
    shape)` built from the leaves, or None when `node` is no round trip."""
    source = node
    while source.op in VIEWS:
        source = nodes[source.operands[0]]
        if source.shape == shape:
            return source.id
    if depth >= DEPTH or node.op not in ELEMENTWISE:
        return None
    if any(nodes[o].shape != node.shape for o in node.operands):
        return None
    operands = []
    viewed = False
    for o in node.operands:
        operand = nodes[o]
        if _is_scalar_fill(operand, nodes):
            operands.append(new.add(operand, operand.operands, shape))
            continue
        folded = _unview(operand, shape, nodes, new, depth + 1)
        if folded is None:
            return None
        viewed = True
        operands.append(folded)
    if not viewed:
        return None
    return new.add(node, tuple(operands), shape)


def _is_scalar_fill(node: Node, nodes: dict[int, Node]) -> bool:
    if node.op != "broadcast" or tuple(node.attrs.get("dims", ())) != ():
        return False
    operand = nodes[node.operands[0]]
    return operand.op == "constant" and operand.shape == ()
