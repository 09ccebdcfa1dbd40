"""Fold the lowering of a tiled all-to-all back into one op.

`lax.all_to_all(x, axis, split_axis=s, concat_axis=c, tiled=True)`, torch-xla's
`xm.all_to_all` and XLA's own `AllToAll` builder all emit the same HLO: an `all-to-all` along
dim s alone (block j of dim s goes to device j, and the blocks a device receives take the same
places, in source order), then a reshape that splits dim s into (devices, s / devices), a
transpose that moves the device dim in front of dim c, and a reshape that merges the two.
Together that is "trade blocks of dim c for blocks of dim s", which is what rules reason
about: the chain becomes `all_to_all[split_dim=s, concat_dim=c]`. XLA's partitioner, when it
reshards a value from one dim to another, splits dim s first and exchanges the new dim of
one entry per device: the same blocks to the same places, so the same fold. Only the exact chain is
folded (each step the only user of the one before, sizes checked); anything else keeps the
raw op, which no rule relates, so a wrong reshape after an all-to-all stays unproved.
"""

from __future__ import annotations

from dataclasses import replace

from scalify.canon.unit_shapes import unit_placements
from scalify.ir import Graph, Node


def fold_tiled_all_to_all(graph: Graph) -> None:
    users = graph.users()
    outputs = set(graph.outputs)
    for node in list(graph.nodes.values()):
        if node.op == "all_to_all" and "dim" in node.attrs and node.id not in outputs:
            chain = _chain(graph, node, users, outputs)
            if chain is not None:
                end, concat, source = chain
                _replace(graph, node, end, concat, source)


def _chain(
    graph: Graph, a2a: Node, users: dict[int, list[int]], outputs: set[int]
) -> tuple[Node, int, Node] | None:
    """The final reshape of the chain after `a2a`, the concat dim, and the value whose dim
    is split (the all-to-all's operand, or what the reshape before it split); None if not
    the idiom. Runs on the raw graph, before reshapes are folded together, so that a user's
    own reshape after the all-to-all stays a separate step (and where a wrong one is
    blamed)."""
    groups = a2a.attrs.get("groups") or ()
    devices = len(groups[0]) if groups else 0
    d = int(a2a.attrs["dim"])
    shape = list(a2a.shape)
    if devices < 2 or shape[d] % devices:
        return None
    source = graph.nodes[a2a.operands[0]]
    before = _split_before(graph, a2a, devices, users, outputs)
    if before is not None:  # split first: [.., n, m, ..] exchanged along n
        split, source, shape = a2a, before, list(before.shape)
    else:
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
    return (merge, concat, source) if merge is not None and list(merge.shape) == want else None


def _split_before(
    graph: Graph, a2a: Node, devices: int, users: dict[int, list[int]], outputs: set[int]
) -> Node | None:
    """What a reshape right before `a2a` split, when it split dim d into (devices, m) and
    the all-to-all exchanges that new dim of one entry per device."""
    d = int(a2a.attrs["dim"])
    shape = list(a2a.shape)
    reshape = graph.nodes[a2a.operands[0]]
    if shape[d] != devices or d + 1 >= len(shape) or reshape.op != "reshape":
        return None
    if _next(graph, reshape, users, outputs, "all_to_all") is not a2a:
        return None
    source = graph.nodes[reshape.operands[0]]
    merged = shape[:d] + [devices * shape[d + 1]] + shape[d + 2 :]
    return source if list(source.shape) == merged else None


def _next(
    graph: Graph, node: Node, users: dict[int, list[int]], outputs: set[int], op: str
) -> Node | None:
    """The only user of `node` when it is an `op`."""
    found = users.get(node.id, [])
    if len(found) != 1 or node.id in outputs:
        return None
    user = graph.nodes[found[0]]
    return user if user.op == op else None


def _replace(graph: Graph, a2a: Node, end: Node, concat: int, source: Node) -> None:
    """The chain's last node becomes the tiled all-to-all of `source` (its users keep their
    operand); the earlier steps are left for pruning. Where `source` only inserts unit dims
    (XLA reshards a [b, s, d] value as [b, 1, s, d]), the exchange is of its operand's dims,
    and the last node the reshape back to the chain's shape: a unit dim dropped after it
    then folds away with it, and the shards move as they do on the value itself."""
    split = int(a2a.attrs["dim"])
    attrs = {k: v for k, v in a2a.attrs.items() if k != "dim"}
    inner = _unit_insert_dims(graph, source)
    if inner is not None and split in inner and concat in inner:
        value = graph.nodes[source.operands[0]]
        shape = list(value.shape)
        n = len(a2a.attrs["groups"][0])  # the devices of each group
        shape[inner.index(split)] //= n
        shape[inner.index(concat)] *= n
        attrs.update(split_dim=inner.index(split), concat_dim=inner.index(concat))
        graph.nodes[a2a.id] = replace(
            a2a, op="all_to_all", operands=(value.id,), shape=tuple(shape), attrs=attrs
        )
        graph.nodes[end.id] = replace(end, op="reshape", operands=(a2a.id,), attrs={})
        return
    attrs.update(split_dim=split, concat_dim=concat)
    graph.nodes[end.id] = Node(
        end.id,
        "all_to_all",
        (source.id,),
        end.shape,
        end.dtype,
        attrs,
        a2a.loc,
        a2a.name,
        a2a.framework_op,
    )


def _unit_insert_dims(graph: Graph, node: Node) -> list[int] | None:
    """Where a reshape that only inserts unit dims puts its operand's dims of size > 1 (the
    same in every placement), listed per operand dim (-1 for its unit dims); None for any
    other node."""
    if node.op != "reshape":
        return None
    operand = graph.nodes[node.operands[0]]
    placements = unit_placements(operand.shape, node.shape)
    if not placements:
        return None
    kept = [
        [p[k] for p in placements] if operand.shape[k] != 1 else [-1]
        for k in range(len(operand.shape))
    ]
    if any(len(set(dims)) != 1 for dims in kept):
        return None
    return [dims[0] for dims in kept]
