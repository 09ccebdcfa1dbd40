"""Fold the lowering of a tiled all-to-all back into one op.

`lax.all_to_all(x, axis, split_axis=s, concat_axis=c, tiled=True)`, torch-xla's
`xm.all_to_all` and XLA's own `AllToAll` builder all emit the same HLO: an `all-to-all` along
dim s alone (block j of dim s goes to device j, and the blocks a device receives take the same
places, in source order), then a reshape that splits dim s into (devices, s / devices), a
transpose that moves the device dim in front of dim c, and a reshape that merges the two.
Together that is "trade blocks of dim c for blocks of dim s", which is what rules reason
about: the chain becomes `all_to_all[split_dim=s, concat_dim=c]`. Only the exact chain is
folded (each step the only user of the one before, sizes checked); anything else keeps the
raw op, which no rule relates, so a wrong reshape after an all-to-all stays unproved.
"""

from __future__ import annotations

from .ir import Graph, Node


def fold_tiled_all_to_all(graph: Graph) -> None:
    users = graph.users()
    outputs = set(graph.outputs)
    for node in list(graph.nodes.values()):
        if node.op == "all_to_all" and "dim" in node.attrs and node.id not in outputs:
            chain = _chain(graph, node, users, outputs)
            if chain is not None:
                end, concat = chain
                _replace(graph, node, end, concat)


def _chain(
    graph: Graph, a2a: Node, users: dict[int, list[int]], outputs: set[int]
) -> tuple[Node, int] | None:
    """The final reshape of the chain after `a2a`, and the concat dim; None if not the idiom.
    Runs on the raw graph, before reshapes are folded together, so that a user's own
    reshape after the all-to-all stays a separate step (and where a wrong one is blamed)."""
    groups = a2a.attrs.get("groups") or ()
    devices = len(groups[0]) if groups else 0
    d = int(a2a.attrs["dim"])
    shape = list(a2a.shape)
    if devices < 2 or shape[d] % devices:
        return None
    split = _next(graph, a2a, users, outputs, "reshape")
    if (
        split is None
        or list(split.shape) != shape[:d] + [devices, shape[d] // devices] + shape[d + 1 :]
    ):
        return None
    trans = _next(graph, split, users, outputs, "transpose")
    if trans is None:
        return None
    perm = list(trans.attrs["perm"])
    p = perm.index(d)  # where the device dim lands
    rest = [k for k in perm if k != d]
    if rest != sorted(rest) or p + 1 >= len(perm) or perm[p + 1] == d + 1:
        return None  # other dims reordered, device dim last, or concat dim == split dim
    concat_in_split = perm[p + 1]
    concat = concat_in_split if concat_in_split < d else concat_in_split - 1
    merge = _next(graph, trans, users, outputs, "reshape")
    want = list(shape)
    want[d] //= devices
    want[concat] *= devices
    return (merge, concat) if merge is not None and list(merge.shape) == want else None


def _next(
    graph: Graph, node: Node, users: dict[int, list[int]], outputs: set[int], op: str
) -> Node | None:
    """The only user of `node` when it is an `op`."""
    found = users.get(node.id, [])
    if len(found) != 1 or node.id in outputs:
        return None
    user = graph.nodes[found[0]]
    return user if user.op == op else None


def _replace(graph: Graph, a2a: Node, end: Node, concat: int) -> None:
    """The chain's last node becomes the tiled all-to-all (its users keep their operand);
    the earlier steps are left for pruning."""
    attrs = {k: v for k, v in a2a.attrs.items() if k != "dim"}
    attrs.update(split_dim=int(a2a.attrs["dim"]), concat_dim=concat)
    graph.nodes[end.id] = Node(
        end.id,
        "all_to_all",
        a2a.operands,
        end.shape,
        end.dtype,
        attrs,
        a2a.loc,
        a2a.name,
        a2a.framework_op,
    )
