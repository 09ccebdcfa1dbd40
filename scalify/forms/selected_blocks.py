"""One device's block handed to every device of its group: XLA's partitioning of a constant
index into a split dim.

`x[:, :, k]` over a dim split over an axis, one entry a device (EasyDeL's Gemma 4 reads each
layer's input so, its layer dim split over two sub-axes of tp), comes out of XLA's
partitioner as

    all_reduce_sum_a(select(coord(a) == k, X, 0))

every device zeroing its block unless it is device k of its group, and the sum handing
device k's block to the whole group. On every device that is, by evaluation alone,

    slice(all_gather_a(X, d), k * b, (k + 1) * b)

along any dim d (b the block's size along d): the all-gather puts device k's block at
offset k * b. This pass adds that equal form, for each dim, beside each such all-reduce;
the rules then relate it to the baseline's slice wherever X is a block of a baseline value
along d over a.
"""

from __future__ import annotations

from dataclasses import replace

from scalify.externs.device_tables import DeviceScalars
from scalify.ir import Graph, Node, dim_slice, place_after
from scalify.mesh import Mesh
from scalify.ops.collectives import collective_axes, permute_senders
from scalify.values import literal_number


def with_selected_block_forms(graph: Graph, mesh: Mesh) -> Graph:
    """A copy of `graph` with the equal form above beside each all-reduce (a sum over one
    axis) of a select that keeps one coordinate's block and zeroes the others; `graph`
    itself when it has none."""
    if mesh.size < 2 or graph.num_partitions != mesh.size:
        return graph
    scalars: DeviceScalars | None = None
    found: list[tuple[Node, int, str, int]] = []  # (all-reduce, kept operand, axis, k)
    for node in graph.nodes.values():
        if node.op != "all_reduce" or node.attrs.get("op") != "sum":
            continue
        axis = collective_axes(node, mesh)
        select = graph.node(node.operands[0])
        if "," in axis or axis.startswith("groups") or select.op != "select":
            continue
        predicate, kept, zeros = select.operands
        if not _zeros(graph, zeros):
            continue
        scalars = scalars or DeviceScalars(graph, mesh.size)
        values = scalars.spread(predicate)
        if values is None:
            continue
        source, holder = _sent_from(graph, kept, mesh.size)
        k = _kept_coordinate([holder[d] if v else None for d, v in enumerate(values)], mesh, axis)
        if k is not None:
            found.append((node, source, axis, k))
    if not found:
        return graph
    copy = replace(graph, nodes=dict(graph.nodes), equalities=list(graph.equalities))
    next_id = max(graph.nodes) + 1
    placed: dict[int, list[int]] = {}
    for node, kept, axis, k in found:
        block = graph.node(kept)
        for dim, b in enumerate(block.shape):
            ids = _form(copy, node, block, axis, dim, k * b, mesh, next_id)
            next_id = ids[-1] + 1
            copy.equalities.append((node.id, ids[-1]))
            placed.setdefault(node.id, []).extend(ids)
    place_after(copy, placed)
    return copy


def _zeros(graph: Graph, node_id: int) -> bool:
    node = graph.node(node_id)
    if node.op == "broadcast" and not node.attrs.get("dims"):
        node = graph.node(node.operands[0])
    return (
        node.op == "constant" and node.shape == () and literal_number(node.attrs.get("value")) == 0
    )


def _sent_from(graph: Graph, node_id: int, devices: int) -> tuple[int, list[int | None]]:
    """Through collective-permutes: the value they hand on, and for each device the device
    whose copy of it this one holds (None where a permute sends it nothing)."""
    holder: list[int | None] = list(range(devices))
    node = graph.node(node_id)
    while node.op == "collective_permute":
        sender = permute_senders(node)
        holder = [None if h is None else sender.get(h) for h in holder]
        node = graph.node(node.operands[0])
    return node.id, holder


def _kept_coordinate(holders: list[int | None], mesh: Mesh, axis: str) -> int | None:
    """k when every device whose group keeps a value keeps the copy of the device with
    coordinate k on `axis` in its own group, and exactly one device of each group keeps it
    (None marks a device whose value the select zeroes)."""
    kept_by: dict[tuple, list[int]] = {}
    for device, holder in enumerate(holders):
        if holder is not None:
            kept_by.setdefault(mesh.group_of(device, axis), []).append(holder)
    groups = {mesh.group_of(d, axis) for d in range(mesh.size)}
    if set(kept_by) != groups or any(len(h) != 1 for h in kept_by.values()):
        return None
    coordinates = {mesh.coordinate(h[0], axis) for h in kept_by.values()}
    same_group = all(mesh.group_of(h[0], axis) == g for g, h in kept_by.items())
    return coordinates.pop() if len(coordinates) == 1 and same_group else None


def _form(
    graph: Graph, node: Node, block: Node, axis: str, dim: int, start: int, mesh: Mesh, next_id: int
) -> list[int]:
    """slice(all_gather_axis(block, dim), start, start + b) along dim: its new nodes, the
    slice last."""
    gathered = list(block.shape)
    gathered[dim] *= mesh.axis_size(axis)
    attrs = {"groups": mesh.axis_groups(axis), "dim": dim}
    made = [node.derived(next_id, "all_gather", (block.id,), gathered, attrs,
                         f"{node.name}.gathered{dim}", block.dtype)]  # fmt: skip
    attrs, _ = dim_slice(tuple(gathered), dim, start, start + block.shape[dim])
    made.append(node.derived(next_id + 1, "slice", (next_id,), block.shape, attrs,
                             f"{node.name}.block{dim}", block.dtype))  # fmt: skip
    for new in made:
        graph.nodes[new.id] = new
    return [new.id for new in made]
