"""Reshape round trips through elementwise ops, folded into an equal form.

Lowerings add and drop size-1 dims around elementwise code: JAX's `take_along_axis` checks
its indices' bounds on a copy viewed with an index-vector dim of one entry, then reduces
that dim away; on a device that holds one group of a vmapped computation it also views the
group dim (of one entry) away and back. `view(f(view'(x), fill))`, where `view` undoes
`view'`, is `f(x, fill)`: row-major reshapes compose to a reshape, and a reshape to the
same shape is the identity. Folding it makes both graphs compute the check the same way,
whatever sizes their dims have. A reduction over one dim of one entry reduces nothing and
counts as a reshape here.

Only whole round trips fold: every leaf of the elementwise tree is a view of a value of
the outer view's shape, or a scalar fill. The folded form is added beside the original,
as an equal value, not in its place: where one graph has a collective between the views
(a psum of a keepdims sum) it cannot fold, and the other graph must still hold the form it
can match.
"""

from __future__ import annotations

from dataclasses import replace

from scalify.ir import Graph, Node, is_scalar_fill
from scalify.ops import ELEMENTWISE

VIEWS = ("merge", "split", "reshape")
DEPTH = 6  # how many elementwise ops deep a round trip is looked for


def with_round_trip_forms(graph: Graph) -> Graph:
    """A copy of `graph` holding the folded forms. Like every form that copies computation,
    they are derived when a graph is proved, from the graph exactly as it stands: a form
    made before a change to the graph (a mutant, a cut) would vouch for the old graph."""
    copy = replace(graph, nodes=dict(graph.nodes), equalities=list(graph.equalities), derived={})
    fold_reshape_round_trips(copy)
    return copy


def fold_reshape_round_trips(graph: Graph) -> None:
    """For each view (or reduction over a unit dim) whose operand is such a round trip, add
    the elementwise ops applied to the unviewed values as an equal form (graph.equalities).
    Both forms stay: the other graph may hold either (a collective between the views keeps
    them there, and a report should name the ops as written)."""
    nodes: dict[int, Node] = {}
    folded_form: dict[int, int] = {}  # a view folded already: its elementwise form
    next_id = max(graph.nodes, default=-1) + 1
    for node in graph.nodes.values():
        if _is_view(node, nodes):
            new = _Copies(next_id, folded_form)
            operand = nodes[folded_form.get(node.operands[0], node.operands[0])]
            folded = _unview(operand, node.shape, nodes, new, 0)
            if folded is not None and new.nodes:
                next_id += len(new.nodes)
                nodes.update({n.id: n for n in new.nodes})
                graph.equalities.append((node.id, folded))
                folded_form[node.id] = folded
        nodes[node.id] = node
    graph.nodes = nodes


class _Copies:
    """The ops of a round trip made again at the outer shape, each where its original is in
    the user's code (its location and name), so that a report points at the same lines."""

    def __init__(self, next_id: int, folded_form: dict[int, int]) -> None:
        self.next_id = next_id
        self.nodes: list[Node] = []
        self.folded_form = folded_form

    def add(self, like: Node, operands: tuple[int, ...], shape: tuple[int, ...]) -> int:
        attrs = dict(like.attrs)
        copy = replace(like, id=self.next_id + len(self.nodes), operands=operands, shape=shape)
        copy.attrs = attrs
        self.nodes.append(copy)
        return copy.id


def _is_view(node: Node, nodes: dict[int, Node]) -> bool:
    return node.op in VIEWS or _reduces_nothing(node, nodes)


def _reduces_nothing(node: Node, nodes: dict[int, Node]) -> bool:
    """A reduction over one dim of one entry: a view that drops that dim."""
    if node.op != "reduce" or len(node.operands) != 1:
        return False
    dims = tuple(node.attrs.get("dims", ()))
    return len(dims) == 1 and nodes[node.operands[0]].shape[dims[0]] == 1


def _unview(
    node: Node, shape: tuple[int, ...], nodes: dict[int, Node], new: _Copies, depth: int
) -> int | None:
    """`node` seen at `shape` without a view: the id of a value equal to `reshape(node,
    shape)` built from the leaves, or None when `node` is no round trip."""
    if _reduces_nothing(node, nodes):  # a view in the middle of the round trip
        return _unview(nodes[node.operands[0]], shape, nodes, new, depth)
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
    mark = len(new.nodes)
    for o in node.operands:
        operand = nodes[o]
        if is_scalar_fill(operand, nodes.__getitem__):
            operands.append(new.add(operand, operand.operands, shape))
            continue
        operand = nodes[new.folded_form.get(o, o)]  # a nested round trip, folded first
        folded = _unview(operand, shape, nodes, new, depth + 1)
        if folded is None:
            del new.nodes[mark:]  # copies made for the operands before this one
            return None
        viewed = True
        operands.append(folded)
    if not viewed:
        return None
    return new.add(node, tuple(operands), shape)
