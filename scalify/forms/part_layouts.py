"""Per-part shards stated through their parts (design: "Per-part shards").

A fused weight `[Wq | Wk | Wv]` whose device holds its block of every part relates to its
baseline by no single e-graph layout: the device's columns are not one block of the fused
dim. Each part does relate by a plain shard: the device's slice at the part's local bounds is
the block of the baseline's slice at the part's global bounds. So a relation with parts is
proved as the relations of its parts, one pair of slice nodes each, and the layouts the rules
know carry on from there. Both programs reach those slices when they cut the fused product at
the part boundaries: `slice_views.py` moves their slices down to the weight itself.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from scalify.forms.slice_views import one_dim_cut, with_slice_alternatives
from scalify.ir import Graph, dim_slice
from scalify.layout import Layout, Placement
from scalify.mesh import Mesh
from scalify.relations import Relation


@dataclass(frozen=True)
class PartCut:
    """One part of a dim: where it lies in the baseline and on each device."""

    dim: int
    base_start: int
    base_end: int
    local_start: int
    local_end: int


def part_cuts(placement: Placement, mesh: Mesh) -> list[PartCut]:
    n = mesh.axis_size(placement.axis)
    cuts, start, local = [], 0, 0
    for size, value_size in zip(placement.parts, placement.part_sizes(), strict=True):
        cuts.append(PartCut(placement.dim, start, start + size, local, local + value_size // n))
        start += size
        local += value_size // n
    return cuts


def parted(layout: Layout) -> Placement | None:
    return next((p for p in layout if p.parts), None)


def without_parts(layout: Layout) -> Layout:
    return tuple(replace(p, parts=(), part_values=()) for p in layout)


def part_layout(layout: Layout, part: int) -> Layout:
    """The plain layout of one part: its padding or repeats, then the placements."""
    p = parted(layout)
    values = p.part_values[part] if p is not None and p.part_values else ()
    return values + without_parts(layout)


def local_part_cuts(relations: list[Relation], mesh: Mesh) -> dict[int, set[tuple[int, int, int]]]:
    """For each distributed node whose relation has parts: its parts as (dim, start, end) in
    local units, the cuts that pick a part of a fused value (see slice_views.py)."""
    cuts: dict[int, set[tuple[int, int, int]]] = {}
    for rel in relations:
        if (p := parted(rel.layout)) is not None:
            cuts.setdefault(rel.dist_id, set()).update(
                (c.dim, c.local_start, c.local_end) for c in part_cuts(p, mesh)
            )
    return cuts


def with_part_views(
    base: Graph, dist: Graph, relations: list[Relation], mesh: Mesh
) -> tuple[Graph, Graph, list[Relation]]:
    """Copies of both graphs with a slice node per part of each relation with parts, and the
    relations with those replaced by one plain relation per part (unchanged when none has
    parts). The new nodes are the proof's: they take the related nodes' places and names."""
    return _split_parts(base, dist, relations, mesh, as_outputs=False)


def with_output_parts(
    base: Graph, dist: Graph, outputs: list[Relation], mesh: Mesh
) -> tuple[Graph, Graph, list[Relation]]:
    """Outputs required to have parts, checked part by part: each part's slice of both
    outputs becomes an output of its own (one plain relation each), so the proof, the
    simulation and the report see the parts. Unchanged when no output has parts."""
    return _split_parts(base, dist, outputs, mesh, as_outputs=True)


def _split_parts(
    base: Graph, dist: Graph, relations: list[Relation], mesh: Mesh, as_outputs: bool
) -> tuple[Graph, Graph, list[Relation]]:
    if not any(parted(r.layout) for r in relations):
        return base, dist, relations
    base, dist = _copy(base), _copy(dist)
    result = []
    for rel in relations:
        p = parted(rel.layout)
        if p is None:
            result.append(rel)
            continue
        parts = _part_relations(base, dist, rel, p, mesh)
        if as_outputs:  # the parts stand where the whole output stood
            base.outputs = _swapped(base.outputs, rel.base_id, [r.base_id for r in parts])
            dist.outputs = _swapped(dist.outputs, rel.dist_id, [r.dist_id for r in parts])
        result += parts
    return base, dist, result


def _swapped(outputs: list[int], whole: int, parts: list[int]) -> list[int]:
    return [o for o in outputs if o != whole] + parts


def _part_relations(
    base: Graph, dist: Graph, rel: Relation, placement: Placement, mesh: Mesh
) -> list[Relation]:
    """A slice node per part in both graphs, and the plain relation between each pair."""
    result = []
    for k, cut in enumerate(part_cuts(placement, mesh)):
        b = _add_slice(base, rel.base_id, cut.dim, cut.base_start, cut.base_end, k)
        d = _add_slice(dist, rel.dist_id, cut.dim, cut.local_start, cut.local_end, k)
        name = f"{rel.name} part {k}"
        result.append(Relation(d, b, name, part_layout(rel.layout, k), rel.source))
    return result


def _copy(graph: Graph) -> Graph:
    return replace(graph, nodes=dict(graph.nodes), outputs=list(graph.outputs), derived={})


def _add_slice(graph: Graph, of: int, dim: int, start: int, end: int, part: int) -> int:
    """A slice of one dim, spelled as `slice_views.py` spells the slices it moves, so the
    e-graph meets the two as one term."""
    source = graph.node(of)
    node_id = max(graph.nodes) + 1
    attrs, sliced = dim_slice(source.shape, dim, start, end)
    name = f"{source.name} part {part}"
    graph.nodes[node_id] = source.derived(node_id, "slice", (of,), sliced, attrs, name)
    return node_id


INFERRED = "inferred from how both graphs cut it"


def infer_parts(base: Graph, dist: Graph, relations: list[Relation], mesh: Mesh) -> list[Relation]:
    """Relations inferred from shapes as `shard(d, a)`, given parts where both programs cut
    the input (or a product of it, followed down to it) at the same boundaries in their own
    units: every boundary at which the baseline cuts dim d, divided by the axis size, is one
    at which the distributed program cuts its block. A plain block could not be cut there
    and give the baseline's pieces, so the parts are what both programs mean. Further cuts of
    the distributed program are its own (a slice at a wrong offset stays a suspect)."""

    def wanted(rel: Relation) -> bool:
        return rel.source == "inferred from shapes" and bool(rel.layout)

    if not any(map(wanted, relations)):
        return relations
    base_cuts = _cut_points(with_slice_alternatives(base, baseline=True))
    dist_cuts = _cut_points(with_slice_alternatives(dist, baseline=True))
    return [
        _with_inferred_parts(r, base_cuts, dist_cuts, base, mesh) if wanted(r) else r
        for r in relations
    ]


def _with_inferred_parts(rel: Relation, base_cuts, dist_cuts, base: Graph, mesh: Mesh):
    for i, p in enumerate(rel.layout):
        if p.kind != "shard":
            continue
        n, size = mesh.axis_size(p.axis), base.node(rel.base_id).shape[p.dim]
        inner = base_cuts.get((rel.base_id, p.dim), set()) - {0, size}
        if not inner or any(b % n for b in inner):
            continue
        if not {b // n for b in inner} <= dist_cuts.get((rel.dist_id, p.dim), set()):
            continue
        bounds = [0, *sorted(inner), size]
        parts = tuple(e - s for s, e in zip(bounds, bounds[1:], strict=False))
        layout = rel.layout[:i] + (replace(p, parts=parts),) + rel.layout[i + 1 :]
        return replace(rel, layout=layout, source=INFERRED)
    return rel


def _cut_points(graph: Graph) -> dict[tuple[int, int], set[int]]:
    """(input, dim) -> the offsets at which some one-dim slice of that input starts or ends."""
    points: dict[tuple[int, int], set[int]] = {}
    inputs = set(graph.inputs)
    for node in graph.nodes.values():
        if node.op != "slice" or node.operands[0] not in inputs:
            continue
        if (cut := one_dim_cut(node, graph)) is not None:
            d, s, e = cut
            points.setdefault((node.operands[0], d), set()).update((s, e))
    return points
