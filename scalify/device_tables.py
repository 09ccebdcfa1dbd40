"""Per-device constant tables, read as the arithmetic they stand for.

XLA's SPMD partitioner gives each device its offset into a sharded dim by indexing a
constant table with the device id: the vocab-parallel lookup starts from
`dynamic-slice({0, 64, 128, 192}, partition-id)`; on a mesh of several axes it first maps
the device id to its coordinate on one axis (`{0, 0, 1, 1}`: the fsdp coordinate of
fsdp=2 x tensor=2) and then the coordinate to the offset (`{0, 64}`). Each such table is an
affine function of a coordinate `c = (id / s) % n` (the device's coordinate on the mesh axis
of n devices and stride s, which `rules/tp.srl`'s `axis_coordinate` reads as `coord(a)`):

- a table of one entry per device with t[i] = t0 + k * ((i / s) % n), indexed by the device
  id, is `t0 + k * ((id / s) % n)`;
- a table of n entries, t[j] = t0 + k*j, indexed by such a coordinate (whose range is
  [0, n) by construction, so the slice's clamp never acts), is `t0 + k * c`.

Written so, an offset is an affine form over a coordinate for `index_forms.py` and a value
the rules relate. Any other table is left as it is.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from .ir import Graph, NewNodes, Node, replace_nodes

_INT = re.compile(r"-?\d+")

Coordinate = tuple[int, int, int]  # (node id of the device id, stride, count)


def fold_device_tables(graph: Graph) -> None:
    """Replace each per-device table lookup of an affine table by its arithmetic."""
    devices = graph.num_partitions
    if not devices or devices < 2:
        return
    coordinates: dict[int, Coordinate] = {}  # nodes known to be a coordinate, and which

    def rewrite(node: Node, next_id: int) -> list[Node]:
        nodes = graph.nodes
        if node.op != "dynamic_slice" or len(node.operands) != 2 or node.shape != (1,):
            return []
        table, index = (nodes[o] for o in node.operands)
        values = _int_table(table)
        if values is None:
            return []
        device = _device_id(index, nodes)
        if device is not None and len(values) == devices:
            found = _coordinate_table(values, devices)
            if found is None:
                return []
            (stride, count), start, step = found
            coordinate = (device, stride, count)
        else:
            coordinate = coordinates.get(_unviewed(index, nodes))
            affine = _affine(values)
            if coordinate is None or affine is None or len(values) != coordinate[2]:
                return []
            start, step = affine
        new = NewNodes(node, next_id)
        pid, stride, count = coordinate
        pid_dtype = nodes[pid].dtype
        value = new.add("div", (pid, _const(new, stride, pid_dtype)), (), pid_dtype, {})
        value = new.add("rem", (value, _const(new, count, pid_dtype)), (), pid_dtype, {})
        if (start, step) == (0, 1):  # the coordinate itself: a table may be indexed by it
            coordinates[value] = coordinate
        value = new.add("convert", (value,), (), node.dtype, {"dtype": node.dtype})
        if step != 1:
            value = new.add("mul", (value, _const(new, step, node.dtype)), (), node.dtype, {})
        if start != 0:
            value = new.add("add", (value, _const(new, start, node.dtype)), (), node.dtype, {})
        new.add("reshape", (value,), (1,), node.dtype, {})
        return new.nodes

    replace_nodes(graph, rewrite)


def _const(new: NewNodes, value: int, dtype: str) -> int:
    return new.add("constant", (), (), dtype, {"value": str(value)})


def _int_table(table: Node) -> list[int] | None:
    if table.op != "constant" or len(table.shape) != 1 or table.dtype[:1] not in "su":
        return None
    values = [int(v) for v in _INT.findall(str(table.attrs.get("value", "")))]
    return values if len(values) == table.shape[0] else None


def _affine(values: list[int]) -> tuple[int, int] | None:
    """(t0, k) when t[j] = t0 + k*j."""
    if len(values) < 2:
        return None
    start, step = values[0], values[1] - values[0]
    return (start, step) if all(v == start + step * j for j, v in enumerate(values)) else None


def _coordinate_table(values: list[int], devices: int) -> tuple[tuple[int, int], int, int] | None:
    """((s, n), t0, k) when t[i] = t0 + k * ((i / s) % n), the smallest such s and n."""
    fit = coordinate_fit([np.asarray(v) for v in values], devices)
    return None if fit is None else (fit[0], values[0], fit[1])


def coordinate_fit(
    per_device: Sequence[np.ndarray], devices: int
) -> tuple[tuple[int, int], int] | None:
    """((s, n), k) when the value on device i is the value on device 0 plus the integer
    `k * ((i / s) % n)` everywhere, for the smallest such s and n: a value affine in the
    device's coordinate on the mesh axis of n devices and stride s (a table of offsets, or
    the positions a device counts from its own offset, literal_arrays.py)."""
    first = np.asarray(per_device[0]).astype(np.int64)
    for stride in (s for s in range(1, devices + 1) if devices % s == 0):
        for count in (n for n in range(2, devices // stride + 1) if devices % (stride * n) == 0):
            steps = np.asarray(per_device[stride]).astype(np.int64) - first
            if steps.size == 0 or not (steps == steps.flat[0]).all():
                continue
            step = int(steps.flat[0])
            if all(
                np.array_equal(
                    np.asarray(v).astype(np.int64), first + step * ((i // stride) % count)
                )
                for i, v in enumerate(per_device)
            ):
                return (stride, count), step
    return None


def _device_id(node: Node, nodes: dict[int, Node]) -> int | None:
    """The device's id in the module (partition-id), possibly cast: its node, else None."""
    while node.op == "convert":
        node = nodes[node.operands[0]]
    is_id = node.op == "rank_index" and node.attrs.get("kind") == "partition"
    return node.id if is_id else None


def _unviewed(node: Node, nodes: dict[int, Node]) -> int:
    """Under reshapes and integer casts (a coordinate keeps its values)."""
    while node.op in ("reshape", "convert"):
        node = nodes[node.operands[0]]
    return node.id
