"""Sub-axes: a mesh axis cut into groups of q neighbouring devices, named for the rules.

With fewer KV heads than tensor devices, each KV head is held by a group of q devices and
each device holds q_per_kv / q of that head's query heads. A program that groups the query
heads by KV head (`q.reshape(b, s, kv, q_per_kv, d)`, as EasyDeL's attention does) then
splits each device's block of heads into a unit KV dim and its share of the group:
`[2] -> [1, 2]` on a device where the baseline cuts `[8] -> [2, 4]`. That device block is
no block of the baseline's split over the whole axis, but it is one over two sub-axes: the
KV dim over `tp/q` (which group) and the group's dim over `tp%q` (where in the group).

The facts here declare those sub-axes (sizes, strides, which axes they are disjoint from)
only where a pair of views needs them: a distributed split whose outer dim is one entry
(or a merge of such a dim) and a baseline split (merge) of the same dim whose inner size is
q times the distributed one's, q a proper divisor of an axis's size. The prelude's
`split-over-sub-axes` and `merge-over-sub-axes` rules read them; `docs/explanation/
terms-and-layouts.md` has the argument that each is exact.
"""

from __future__ import annotations

from dataclasses import replace

from scalify.engine.encode import egg_string, node_ref
from scalify.engine.signature import node_signature
from scalify.ir import Graph, Node, place_after
from scalify.mesh import Mesh, sub_axes, sub_axis_parts
from scalify.ops import COLLECTIVES
from scalify.ops.collectives import collective_axes

VIEWS = ("split", "merge")


def sub_axis_facts(base: Graph, dist: Graph, mesh: Mesh) -> list[str]:
    """The facts for every pairing of a distributed view with a unit dim and a baseline
    view of the same dim that it is a block of over two sub-axes (or two axes, or one
    axis beside a true unit); none when no pair. Pairs are of keys, each stated once: an
    unrolled scan repeats the same views thousands of times, and a fact per pair of nodes
    made millions of them (EasyDeL's Mamba-2)."""
    facts: list[str] = []
    declared: set[tuple[str, int]] = set()
    twins: dict[tuple[str, int, int], dict[tuple[int, int, str], None]] = {}
    for twin in base.nodes.values():
        if twin.op in VIEWS:
            group = (twin.op, twin.attrs["dim"], len(base.node(twin.operands[0]).shape))
            found = (twin.attrs["inner"], _viewed_size(twin, base))
            twins.setdefault(group, {})[(*found, node_signature(twin, base, mesh).key)] = None
    pairs: dict[str, None] = {}
    for node in dist.nodes.values():
        k = _unit_view_inner(node, dist)
        if k is None:
            continue
        dim = node.attrs["dim"]
        dist_key = node_signature(node, dist, mesh).key
        unit = node.id if node.op == "split" else node.operands[0]  # the side whose dim is 1
        facts.append(f"(UnitAt {node_ref('d', unit)} {dim})")
        group = (node.op, dim, len(dist.node(node.operands[0]).shape))
        for m, whole, base_key in twins.get(group, ()):
            if m <= k or m % k:
                continue
            q = m // k
            for outer, inner in _axis_pairs(mesh, q, whole // k if whole % k == 0 else 0):
                pairs[
                    f"(SubView {egg_string(dist_key)} {egg_string(base_key)} "
                    f"{egg_string(outer)} {egg_string(inner)})"
                ] = None
                if "%" in inner:
                    declared.add((inner.split("%")[0], q))
    facts += pairs
    named = _named_by_collectives(dist, mesh)
    if not named and not any(f.startswith("(SubView") for f in facts):
        return []
    return _declarations(declared | named, mesh) + facts


def _named_by_collectives(dist: Graph, mesh: Mesh) -> set[tuple[str, int]]:
    """The sub-axes whose groups a collective runs over (an all-reduce completing a sum
    over the devices of one KV head's group: Gemma 4 at tp 4), as (axis, q)."""
    named = set()
    for node in dist.nodes.values():
        if node.op in COLLECTIVES and node.op != "collective_permute":
            for part in collective_axes(node, mesh).split(","):
                axis, op, q = sub_axis_parts(part)
                if op is not None:
                    named.add((axis, q))
    return named


def with_sub_view_forms(dist: Graph, base: Graph, mesh: Mesh) -> Graph:
    """`dist` with an equal form `split[dim=d, inner=k](x)` beside each view that inserts a
    unit dim before dim d of x (k its size), where the baseline splits dim d with an inner
    size q * k for a proper divisor q of an axis's size: canonicalisation reads the
    insertion as a split of whichever dim it chose (one query head a device,
    `[b, s, 1, d] -> [b, s, 1, 1, d]`, is read as a split of d), and the rules need the
    split of the heads. Likewise `merge[dim=d, inner=k](x)` beside each view that drops a
    unit dim of x by merging it with a neighbour, where the baseline merges dim d with an
    inner size q * k: a true unit beside a dim split down to one entry a device is two
    units, and canonicalisation may merge the wrong pair (Mamba-2's `[1, heads]`)."""
    inners = {
        op: {(n.attrs["dim"], n.attrs["inner"]) for n in base.nodes.values() if n.op == op}
        for op in VIEWS
    }
    sizes = {n for _, n in mesh.axes}
    forms: list[tuple[int, Node]] = []
    next_id = max(dist.nodes, default=-1) + 1
    for node in dist.nodes.values():
        if len(node.operands) != 1:
            continue
        x = dist.node(node.operands[0])
        for op, d, k in _unit_readings(node, x.shape):
            attrs = {"dim": d, "inner": k}
            if k == 0 or (node.op == op and node.attrs == attrs):
                continue  # an empty dim, or this reading already
            if not any(
                dim == d and m > k and m % k == 0 and any(n % (m // k) == 0 for n in sizes)
                for dim, m in inners[op]
            ):
                continue
            name = f"{node.name}.{op}{d}"
            forms.append((node.id, node.derived(next_id, op, (x.id,), node.shape, attrs, name)))
            next_id += 1
    if not forms:
        return dist
    copy = replace(dist, nodes=dict(dist.nodes), equalities=list(dist.equalities))
    placed: dict[int, list[int]] = {}
    for at, form in forms:
        copy.nodes[form.id] = form
        copy.equalities.append((at, form.id))
        placed.setdefault(at, []).append(form.id)
    place_after(copy, placed)
    return copy


def _unit_readings(node: Node, shape: tuple[int, ...]) -> list[tuple[str, int, int]]:
    """Each (view, dim, inner) that reads `node` as a unit dim inserted into `shape` (a split
    or broadcast: a split of the dim after it) or dropped from it (a merge: with the dim
    before it, or with the one after)."""
    readings = []
    if node.op in ("split", "broadcast"):
        for d, k in enumerate(shape):
            if node.shape == shape[:d] + (1,) + shape[d:]:
                readings.append(("split", d, k))
    elif node.op == "merge":
        for u, size in enumerate(shape):
            if size != 1 or node.shape != shape[:u] + shape[u + 1 :]:
                continue
            if u > 0:
                readings.append(("merge", u - 1, 1))
            if u + 1 < len(shape):
                readings.append(("merge", u, shape[u + 1]))
    return readings


def _axis_pairs(mesh: Mesh, q: int, blocks: int) -> list[tuple[str, str]]:
    """The (outer, inner) axes a dim of `blocks` device blocks may be split over, the inner
    of size q: the two sub-axes of one axis of `blocks` devices, two mesh axes whose sizes
    multiply to it, or ("", axis) for one axis of q devices (the outer dim has one entry in
    both programs: a true unit beside a dim split down to one entry a device)."""
    pairs = [("", axis) for axis, n in mesh.axes if n == q == blocks]
    for axis, n in mesh.axes:
        if q < n and n % q == 0 and n == blocks:
            pairs.append(sub_axes(axis, q))
    for outer, n_o in mesh.axes:
        for inner, n_i in mesh.axes:
            if outer != inner and n_i == q and n_o * n_i == blocks:
                pairs.append((outer, inner))
    return pairs


def _viewed_size(node: Node, graph: Graph) -> int:
    """The size of the dim a split cuts (a merge makes)."""
    dim = node.attrs["dim"]
    return graph.node(node.operands[0]).shape[dim] if node.op == "split" else node.shape[dim]


def _unit_view_inner(node: Node, graph: Graph) -> int | None:
    """The inner size of a split whose outer dim has one entry, or of a merge of a dim of
    one entry; None for any other node."""
    if node.op not in VIEWS:
        return None
    dim = node.attrs["dim"]
    outer = node.shape[dim] if node.op == "split" else graph.node(node.operands[0]).shape[dim]
    return node.attrs["inner"] if outer == 1 else None


def _declarations(declared: set[tuple[str, int]], mesh: Mesh) -> list[str]:
    """Each sub-axis pair as axes of their own: sizes, strides (a device's coordinate on
    `a/q` is (id / (stride(a) * q)) % (n / q), on `a%q` (id / stride(a)) % q), and the axes
    each is disjoint from (its twin, and every other mesh axis)."""
    facts = []
    for axis, q in sorted(declared):
        outer, inner = sub_axes(axis, q)
        n = mesh.axis_size(axis)
        o, i, stride = egg_string(outer), egg_string(inner), mesh.stride(axis)
        facts += [
            f"(Axis {o})",
            f"(Axis {i})",
            f"(set (AxisSize {o}) {n // q})",
            f"(set (AxisSize {i}) {q})",
            f"(set (AxisStride {o}) {stride * q})",
            f"(set (AxisStride {i}) {stride})",
            f"(SubAxes {egg_string(axis)} {o} {i})",
        ]
        disjoint = [(o, i), (i, o)]
        for other in (egg_string(x) for x in mesh.names if x != axis):
            disjoint += [(o, other), (i, other), (other, o), (other, i)]
        facts += [f"(AxisDisjoint {a} {b})" for a, b in disjoint]
    return facts
