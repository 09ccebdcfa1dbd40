"""The unit of a repeat read from shapes: what a converter repeats is heads, not columns.

A weight whose blocks on the devices add up to more than the baseline's columns is read
from its shapes as `repeated(d, k) padded(d, n) shard(d, a)` (`relations._padding`): the
KV heads repeated for the q heads they serve, then padded. The shapes say how many times,
not what is repeated: each column (unit 1) or each head of `head_dim` columns. Both
programs say it where they split the projection into heads: the baseline splits its
`kv_heads * head_dim` columns, the device its local ones, each with `head_dim` as the inner
factor. A unit that both programs split by, downstream of the input, and that divides both
sizes, is taken as the repeat's unit; the report names it as inferred. With no such unit,
or several, the repeat stays per column, which proves nothing it should not.
"""

from __future__ import annotations

from dataclasses import replace

from scalify.ir import Graph
from scalify.layout import Layout
from scalify.relations import Relation

INFERRED_UNIT = "each run of {unit} repeated: the size both graphs split it by"


def infer_repeat_units(base: Graph, dist: Graph, relations: list[Relation]) -> list[Relation]:
    """Relations whose inferred repeat has unit 1 given the unit both programs split by."""
    return [_with_unit(rel, base, dist) for rel in relations]


def _with_unit(rel: Relation, base: Graph, dist: Graph) -> Relation:
    if "relations file" in rel.source:
        return rel  # stated by the user: taken as written
    layout: Layout = rel.layout
    for i, p in enumerate(layout):
        if p.kind != "repeated" or p.unit != 1:
            continue
        b = base.node(rel.base_id).shape[p.dim]
        d = dist.node(rel.dist_id).shape[p.dim]
        units = _split_inners(base, rel.base_id, b) & _split_inners(dist, rel.dist_id, d)
        units = {u for u in units if u > 1 and b % u == 0 and d % u == 0}
        if len(units) != 1:
            return rel
        (unit,) = units
        layout = layout[:i] + (replace(p, unit=unit),) + layout[i + 1 :]
        source = f"{rel.source}; {INFERRED_UNIT.format(unit=unit)}"
        return replace(rel, layout=layout, source=source)
    return rel


def _split_inners(graph: Graph, source: int, size: int) -> set[int]:
    """Inner sizes of the splits, downstream of `source`, of a dim of this size."""
    inners: set[int] = set()
    users = graph.users()
    seen, todo = {source}, [source]
    while todo:
        for user in users.get(todo.pop(), ()):
            if user in seen:
                continue
            seen.add(user)
            todo.append(user)
            node = graph.node(user)
            if node.op == "split":
                operand = graph.node(node.operands[0])
                if operand.shape[node.attrs["dim"]] == size:
                    inners.add(int(node.attrs["inner"]))
    return inners
