"""A broadcast to a device's block of a new dim, read as a block of the baseline's broadcast.

A value the same for every row of a batch (a sliding window's mask, made from iotas) is
broadcast along the batch dim. With the batch split over fsdp the partitioned program
broadcasts it to the device's rows, one where the baseline broadcasts it to two: the keys
differ in that dim's size (`new=0:1` against `new=0:2`), so no rule relates the two.

Slicing a broadcast along a dim it creates gives the same broadcast, smaller, wherever the
slice starts. So on every device

    broadcast[new e: s](x) == slice_at[e, s](broadcast[new e: s * n](x), s * coord(a))

for any axis a of n devices, by the broadcast's definition alone. This pass adds that form
where the device's new dim e has one entry (s = 1: the device's one row, which
canonicalisation otherwise reads as a reshape) and the baseline has a broadcast with the
same kept dims whose dim e has n entries (its other new dims the same): its key is then the
baseline's, and the rules read the slice at the device's coordinate as its block over a.
Wider blocks are left to the paired-broadcast forms: pairing every broadcast along a
sequence split over sp with each axis of sp's size grew EasyDeL's Llama at tp 2 x sp 2
past the machine's memory.
"""

from __future__ import annotations

from dataclasses import replace

from .coordinate_form import device_coordinate
from .ir import Graph, Node, place_after
from .mesh import Mesh


def with_broadcast_block_forms(dist: Graph, base: Graph, mesh: Mesh) -> Graph:
    """`dist` with the equal form above beside each broadcast it holds for; `dist` itself
    when none does."""
    if mesh.size < 2:
        return dist
    wanted = {_signature(n) for n in base.nodes.values() if n.op == "broadcast"}
    found: list[tuple[Node, int, str]] = []  # (broadcast, its new dim e, the axis)
    for node in dist.nodes.values():
        if node.op != "broadcast" or not node.operands:
            continue
        dims, rank, sizes = _signature(node)
        for e in (e for e, size in sizes if size == 1):
            for axis, n in mesh.axes:
                grown = tuple((d, m * n if d == e else m) for d, m in sizes)
                if (dims, rank, grown) in wanted:
                    found.append((node, e, axis))
    if not found:
        return dist
    copy = replace(dist, nodes=dict(dist.nodes), equalities=list(dist.equalities))
    next_id = max(dist.nodes) + 1
    placed: dict[int, list[int]] = {}
    for node, e, axis in found:
        ids = _form(copy, node, e, axis, mesh, next_id)
        next_id = ids[-1] + 1
        copy.equalities.append((node.id, ids[-1]))
        placed.setdefault(node.id, []).extend(ids)
    place_after(copy, placed)
    return copy


def _signature(node: Node) -> tuple[tuple[int, ...], int, tuple[tuple[int, int], ...]]:
    """What a broadcast's key reads: its kept dims, its rank, and its new dims' sizes."""
    dims = tuple(node.attrs["dims"])
    new = tuple((d, n) for d, n in enumerate(node.shape) if d not in dims)
    return dims, len(node.shape), new


def _form(graph: Graph, node: Node, e: int, axis: str, mesh: Mesh, next_id: int) -> list[int]:
    """slice_at[e, s](broadcast[new e: s * n](x), s * coord(axis)): its new nodes, the form
    last."""
    made: list[Node] = []

    def add(op: str, operands: tuple[int, ...], shape, dtype: str, attrs: dict) -> int:
        new = Node(next_id + len(made), op, operands, tuple(shape), dtype, attrs, node.loc,
                   f"{node.name}.block_{op}", node.framework_op)  # fmt: skip
        made.append(new)
        graph.nodes[new.id] = new
        return new.id

    n, s = mesh.axis_size(axis), node.shape[e]
    whole = list(node.shape)
    whole[e] = s * n
    wide = add("broadcast", node.operands, whole, node.dtype, dict(node.attrs))
    coord = device_coordinate(add, n, mesh.stride(axis), "s32")
    step = add("constant", (), (), "s32", {"value": str(s)})
    offset = add("mul", (coord, step), (), "s32", {})
    add("slice_at", (wide, offset), node.shape, node.dtype, {"dim": e, "size": s, "parts": n})
    return [m.id for m in made]
