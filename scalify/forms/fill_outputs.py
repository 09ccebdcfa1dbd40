"""Outputs that are fills of one scalar: every layout that fits their shape.

A training step's gradient of a parameter the loss never reads is `zeros(shape)` in both
programs, at the local shape in the distributed one. Terms carry no sizes, so the e-graph
cannot relate two fills of different shapes (a 2-row fill is no 8-row fill); at an output
both shapes are known. Every block of a fill of c is the fill of c at the block's shape, so
a shard or a replica of the baseline's fill holds exactly when the local shape is the
layout's; a reduction over an axis of n devices holds for max and min, and for a sum only
when c is 0 (n copies of c sum to n*c).
"""

from __future__ import annotations

from scalify.ir import Graph, is_scalar_fill
from scalify.layout import Layout, local_shape
from scalify.mesh import Mesh
from scalify.values import literal_number


def fill_fits(
    base: Graph, base_id: int, dist: Graph, dist_id: int, layout: Layout, mesh: Mesh
) -> bool:
    """Whether both outputs fill the same scalar literal and the distributed one holds the
    baseline's under `layout`."""
    value = _fill_value(base, base_id)
    if value is None or value != _fill_value(dist, dist_id):
        return False
    if local_shape(base.node(base_id).shape, layout, mesh) != dist.node(dist_id).shape:
        return False
    return all(
        (p.kind == "shard" and not p.parts)
        or (p.kind == "partial" and (p.op in ("max", "min") or _is_zero(value)))
        for p in layout
    )


def _fill_value(graph: Graph, node_id: int) -> tuple[str, str] | None:
    node = graph.node(node_id)
    if not is_scalar_fill(node, graph.node):
        return None
    return str(graph.node(node.operands[0]).attrs.get("value")), node.dtype


def _is_zero(value: tuple[str, str]) -> bool:
    return literal_number(value[0]) == 0.0
