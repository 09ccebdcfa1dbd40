"""Per-device constant tables, read as the arithmetic they stand for.

XLA's SPMD partitioner gives each device its offset into a sharded dim by indexing a
constant table with the device id: the vocab-parallel lookup starts from
`dynamic-slice({0, 64, 128, 192}, partition-id)`. Such a table, when it is affine in the
device id (t[i] = t0 + s*i) and has one entry per device, is exactly
`t0 + s * ((partition-id / 1) % n)`: the device's coordinate on an axis of all n devices
(what `rules/tp.srl`'s `axis_coordinate` reads as `coord(a)` on a one-axis mesh), scaled.
Written so, the offset is an affine form over that coordinate for `index_forms.py` and a
value the rules relate. Other tables are left as they are.
"""

from __future__ import annotations

import re

from .ir import Graph, NewNodes, Node, replace_nodes

_INT = re.compile(r"-?\d+")


def fold_device_tables(graph: Graph) -> None:
    """Replace each affine per-device table lookup by its arithmetic."""
    devices = graph.num_partitions
    if not devices or devices < 2:
        return
    nodes = graph.nodes

    def rewrite(node: Node, next_id: int) -> list[Node]:
        if node.op != "dynamic_slice" or len(node.operands) != 2 or node.shape != (1,):
            return []
        table, index = (nodes[o] for o in node.operands)
        affine = _affine_table(table, devices)
        if affine is None or not _is_device_id(index, nodes):
            return []
        start, step = affine
        new = NewNodes(node, next_id)
        device = index.id
        stride = new.add("constant", (), (), index.dtype, {"value": "1"})
        count = new.add("constant", (), (), index.dtype, {"value": str(devices)})
        quotient = new.add("div", (device, stride), (), index.dtype, {})
        coordinate = new.add("rem", (quotient, count), (), index.dtype, {})
        value = new.add("convert", (coordinate,), (), node.dtype, {"dtype": node.dtype})
        if step != 1:
            factor = new.add("constant", (), (), node.dtype, {"value": str(step)})
            value = new.add("mul", (value, factor), (), node.dtype, {})
        if start != 0:
            offset = new.add("constant", (), (), node.dtype, {"value": str(start)})
            value = new.add("add", (value, offset), (), node.dtype, {})
        new.add("reshape", (value,), (1,), node.dtype, {})
        return new.nodes

    replace_nodes(graph, rewrite)


def _affine_table(table: Node, devices: int) -> tuple[int, int] | None:
    """(t0, s) when the constant is one integer per device, t[i] = t0 + s*i."""
    if table.op != "constant" or table.shape != (devices,) or table.dtype[:1] not in "su":
        return None
    values = [int(v) for v in _INT.findall(str(table.attrs.get("value", "")))]
    if len(values) != devices:
        return None
    start, step = values[0], values[1] - values[0]
    if any(v != start + step * i for i, v in enumerate(values)):
        return None
    return start, step


def _is_device_id(node: Node, nodes: dict[int, Node]) -> bool:
    """The device's id in the module (partition-id), possibly cast."""
    while node.op == "convert":
        node = nodes[node.operands[0]]
    return node.op == "rank_index" and node.attrs.get("kind") == "partition"
