"""A view of an elementwise op with a broadcast operand, read both ways.

`linear(x, w, b)` on a 3-D input is traced as `view(addmm(b, view(x), w))`: the bias is added
to the flattened product and the result is split back. A row-parallel projection with a bias
(transformers' `rowwise`, Megatron's `RowParallelLinear`) adds it after the all-reduce, to the
product already split back: `add(all_reduce(view(mm)), broadcast(b))`. The two are the same
value, `view(f(x, broadcast(b))) == f(view(x), broadcast'(b))` whenever the view merges or
splits dims that the broadcast operand does not have, and only one spelling meets the other
graph. Both spellings go into the e-graph as equal values.
"""

from __future__ import annotations

from scalify.ir import Graph, Node
from scalify.ops import ELEMENTWISE

_VIEWS = ("merge", "split")


def add_views_through_broadcasts(graph: Graph) -> None:
    """For each merge or split of an elementwise op with one broadcast operand, add the
    elementwise op over the viewed other operand and a re-aimed broadcast, equal to it."""
    next_id = max(graph.nodes, default=-1) + 1
    added: dict[int, Node] = {}
    done = {n.name for n in graph.nodes.values() if n.name.endswith(".through")}
    for node in list(graph.nodes.values()):
        if node.op not in _VIEWS or f"{node.name}.through" in done:
            continue
        source = graph.nodes[node.operands[0]]
        if source.op not in ELEMENTWISE or len(source.operands) != 2:
            continue
        for k in (0, 1):
            spread = graph.nodes[source.operands[k]]
            other = graph.nodes[source.operands[1 - k]]
            dims = _moved_dims(node, spread, other)
            if dims is None:
                continue
            view = Node(
                next_id, node.op, (other.id,), node.shape, other.dtype, dict(node.attrs),
                node.loc, f"{node.name}.inner", node.framework_op,
            )  # fmt: skip
            broadcast = Node(
                next_id + 1, "broadcast", spread.operands, node.shape, spread.dtype,
                {**spread.attrs, "dims": dims}, spread.loc, f"{node.name}.spread",
                spread.framework_op,
            )  # fmt: skip
            operands = (view.id, broadcast.id) if k == 1 else (broadcast.id, view.id)
            outer = Node(
                next_id + 2, source.op, operands, node.shape, source.dtype,
                dict(source.attrs), source.loc, f"{node.name}.through", source.framework_op,
            )  # fmt: skip
            for made in (view, broadcast, outer):
                added[made.id] = made
            graph.equalities.append((node.id, outer.id))
            next_id += 3
            break
    graph.nodes.update(added)


def _moved_dims(view: Node, spread: Node, other: Node) -> tuple[int, ...] | None:
    """The broadcast's dims after the view, or None when `spread` is no broadcast, the
    other operand is one too, or the view touches a dim the broadcast operand has."""
    if spread.op != "broadcast" or other.op == "broadcast" or other.shape != spread.shape:
        return None
    p = int(view.attrs["dim"])
    touched = (p, p + 1) if view.op == "merge" else (p,)
    dims = tuple(spread.attrs["dims"])
    if any(d in touched for d in dims):
        return None
    if view.op == "merge":
        return tuple(d if d < p else d - 1 for d in dims)
    return tuple(d if d < p else d + 1 for d in dims)
