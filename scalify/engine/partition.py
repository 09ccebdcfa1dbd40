"""Partitioning and memoisation: prove a deep graph one segment at a time.

A *cut* is a point in the topological order where exactly one computed value is live (the
residual stream between two transformer layers is the typical one): everything after it
depends on earlier work only through that value, the parameters and literals. Both graphs
are cut, segments are paired in order, and each pair is proved in its own small e-graph
with the relation proven at the previous cut as an input relation. Chaining is sound: a
segment's proof holds for every input that satisfies its input relations.

Segments that are structurally identical (same ops, attributes, shapes, dtypes and input
relations, whatever the parameter names or source lines) share one proof: a stack of
identical layers is proved once. A bug in one layer makes its segment different, so that
layer is proved, and localised, on its own.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace

from scalify.ir import Graph, Node, literal_nodes
from scalify.layout import Layout, canonical, layout_str
from scalify.ops import COLLECTIVES, OPS
from scalify.relations import Relation


@dataclass
class Segment:
    nodes: list[int]  # computed nodes in order, ending with the exit cut
    entry: int | None  # the cut value this segment starts from (None for the first)

    @property
    def exit(self) -> int:
        return self.nodes[-1]


# Data movement that a view of a parameter may go through and stay a leaf of the segments.
VIEW_OPS = frozenset({"slice", "merge", "split", "transpose", "convert", "reshape"})
# Cheap ops a prologue computes from the inputs for every layer (a causal mask from the
# positions, RoPE's cos and sin, a weight handed through a custom call): leaves too, so that
# a program computing them all up front still cuts between its layers. Not contractions, not
# reductions: copying those into each segment would copy a layer's work.
PROLOGUE_OPS = frozenset({"broadcast"})


def leaf_nodes(graph: Graph) -> set[int]:
    """Literals, a device's index and arithmetic on it alone (a vocab block's start), views
    of parameters (a layer's slice of stacked weights, as an unrolled scan reads them), and a
    prologue's cheap values of the inputs (`PROLOGUE_OPS`, elementwise ops, outer products):
    values every segment may copy in, never live across a cut."""
    return graph.memo("leaf_nodes", _leaf_nodes)


def _leaf_nodes(graph: Graph) -> set[int]:
    leaf = set(literal_nodes(graph))
    views: set[int] = set()
    for node in graph.nodes.values():
        if node.op == "rank_index" or (  # a device's index, and arithmetic on it alone
            node.op not in COLLECTIVES
            and node.id not in leaf
            and node.operands
            and all(o in leaf and graph.node(o).op != "parameter" for o in node.operands)
            and not any(o in views for o in node.operands)
        ):
            leaf.add(node.id)
        elif (
            (node.op in VIEW_OPS or _prologue_op(graph, node))
            and node.operands
            and all(o in leaf or graph.node(o).op == "parameter" for o in node.operands)
        ):
            leaf.add(node.id)
            views.add(node.id)
    return leaf


def _prologue_op(graph: Graph, node: Node) -> bool:
    """An op a prologue may compute per layer: see `PROLOGUE_OPS`."""
    spec = OPS.get(node.op)
    if node.op == "opaque":  # a custom call handing one value through, not a fused kernel
        return len(node.operands) == 1
    if node.op in PROLOGUE_OPS or (spec is not None and spec.elementwise and spec.pure):
        return True
    if node.op == "dot":  # an outer product: no dim of size above 1 is contracted
        lhs = graph.node(node.operands[0])
        return all(lhs.shape[d] == 1 for d in node.attrs.get("lhs_contracting", ()))
    return False


# A training step's forward pass is at least 1/FORWARD_SHARE of its computed work: about a
# third with gradients alone, a fifth with the optimizer's update (AdamW) after them.
FORWARD_SHARE = 8


def forward_region(graph: Graph) -> set[int]:
    """A training step's forward pass: the computed ancestors of its loss (its earliest or its
    lowest-rank output: a scalar or one per token) when they are 1/FORWARD_SHARE of the
    program or more and the other outputs (the gradients) come after it, with the equal
    forms of those values (an equal form lives with its node); empty otherwise. The
    backward reads the forward's saved values long after they were made, so no single value
    is live between two layers of the whole program; within each pass one is."""
    return graph.memo("forward_region", _forward_region)


def _forward_region(graph: Graph) -> set[int]:
    position = _positions(graph)
    computed = [o for o in graph.outputs if graph.node(o).op != "parameter"]
    if len(computed) < 2:
        return set()
    # the loss: the earliest output, or the lowest-rank one (a compiler may schedule an
    # optimizer's update of a weight before the loss's last reduction); where both pass, the
    # smaller region (every update is made from the loss's forward pass and more)
    earliest = min(computed, key=position.__getitem__)
    lowest = min(computed, key=lambda o: (len(graph.node(o).shape), position[o]))
    regions = [_loss_region(graph, first, computed) for first in dict.fromkeys((earliest, lowest))]
    return min((r for r in regions if r), key=len, default=set())


def _loss_region(graph: Graph, first: int, computed: list[int]) -> set[int]:
    """The forward pass when `first` is the loss (see `forward_region`), else empty."""
    if first == final_output(graph):
        return set()
    region = graph.computed_ancestors([first], set())
    if any(o in region for o in computed if o != first):
        return set()
    backward = graph.computed_ancestors([o for o in computed if o != first], region)
    partners = graph.memo("equality_partners", _equality_partners)
    forms = [p for n in region for p in partners.get(n, ()) if p not in region]
    while forms:  # equal forms of forward values, and what only they are made from (not
        added: set[int] = set()  # one made from a backward value: that one stays behind)
        for form in forms:
            made_from = graph.computed_ancestors([form], region | added)
            if not made_from & backward:
                added |= made_from
        region |= added
        forms = [p for n in added for p in partners.get(n, ()) if p not in region]
    literal = leaf_nodes(graph)
    work = len(region - literal)
    total = sum(1 for n in graph.nodes.values() if n.op != "parameter" and n.id not in literal)
    if work * FORWARD_SHARE < total:
        return set()  # not a forward pass: a small part of the program
    return region


def in_pass_order(graph: Graph) -> Graph:
    """The graph with its forward pass first, in the program's order, and its backward in
    reverse order of the forward values it reads: a backward value goes with the earliest
    forward value it or its backward operands read (layer i's backward reads layer i's
    activations), in order of depth among those. A weight's gradient then sits with its
    layer's backward, not where the compiler scheduled it. An equal form of a value, and
    what only it is made from, sit right after the value. This is the order cuts are looked
    for in. The graph itself when it has no forward pass of its own."""
    forward = forward_region(graph)
    if not forward:
        return graph
    position = _positions(graph)
    pass_key = _pass_keys(graph, forward, position)
    anchored = _form_anchors(graph, position)

    def key(node_id: int) -> tuple:
        if node_id in anchored:
            root, rank = anchored[node_id]
            return (*pass_key[root], rank, position[node_id])
        return (*pass_key[node_id], 0, 0)

    for _ in range(8):  # a form made from a value its node's pass does not have stays put
        order = sorted(graph.nodes, key=key)
        early = _before_operands(graph, order)
        if not early:
            return replace(graph, nodes={n: graph.nodes[n] for n in order}, derived={})
        if not early & anchored.keys():
            break
        for node_id in early:
            anchored.pop(node_id, None)
    return graph


def _before_operands(graph: Graph, order: list[int]) -> set[int]:
    """The nodes `order` puts before one of their operands."""
    seen: set[int] = set()
    early = set()
    for node_id in order:
        if not all(o in seen for o in graph.node(node_id).operands):
            early.add(node_id)
        seen.add(node_id)
    return early


def _pass_keys(graph: Graph, forward: set[int], position: dict[int, int]) -> dict[int, tuple]:
    """Each node's place: the forward (and the inputs) by position; the backward by the
    earliest forward value it goes with, latest first, then by depth among backward values.
    A backward value that reads no forward value (a one-hot of the input tokens for the
    embedding's gradient, the loss's seed) goes with its first user."""
    backward = {n for n in graph.nodes if n not in forward and graph.node(n).op != "parameter"}
    leaves = leaf_nodes(graph)  # a prologue's values (RoPE's tables) go with every layer
    depth: dict[int, int] = {}
    reads: dict[int, int] = {}
    none = len(position)
    for node in graph.nodes.values():
        if node.id not in backward:
            continue
        inside = [o for o in node.operands if o in backward]
        depth[node.id] = 1 + max((depth[o] for o in inside), default=-1)
        read = [position[o] for o in node.operands if o in forward and o not in leaves]
        reads[node.id] = min(read + [reads[o] for o in inside], default=none)
    users = graph.memo("users", Graph.users)
    for node_id in reversed(list(graph.nodes)):
        if node_id in backward and reads[node_id] == none:
            reads[node_id] = max(
                (reads[u] for u in users.get(node_id, []) if u in backward), default=none
            )
    return {
        n: (True, -reads[n], depth[n], position[n]) if n in backward else (False, 0, 0, position[n])
        for n in graph.nodes
    }


def _form_anchors(graph: Graph, position: dict[int, int]) -> dict[int, tuple[int, int]]:
    """Equal forms (rank 2) and the nodes only they read (rank 1), each with the value it
    is a form of: canonicalisation appends them at the end of the program."""
    form_of = {b: a for a, b in graph.equalities if position[b] > position[a]}
    anchored: dict[int, tuple[int, int]] = {}
    for b, a in form_of.items():
        while a in form_of:
            a = form_of[a]
        anchored[b] = (a, 2)
    users = graph.memo("users", Graph.users)
    outputs = set(graph.outputs)
    for node_id in reversed(list(graph.nodes)):
        uses = users.get(node_id, [])
        if node_id in anchored or node_id in outputs or not uses:
            continue
        if all(u in anchored for u in uses) and graph.node(node_id).op != "parameter":
            first = min(uses, key=position.__getitem__)
            anchored[node_id] = (anchored[first][0], 1)
    return anchored


def cut_points(graph: Graph) -> list[int]:
    """Computed nodes right after which they are the only computed value still needed: in a
    training step, within each pass (see `forward_region`), where the backward reads the
    forward's values as inputs proved before it."""
    literal = leaf_nodes(graph)
    order = [n.id for n in graph.nodes.values() if n.op != "parameter" and n.id not in literal]
    forward = forward_region(graph)
    if not forward:
        return _cuts(graph, order, final_output(graph))
    position = _positions(graph)
    loss = max((o for o in graph.outputs if o in forward), key=position.__getitem__)
    return _cuts(graph, [n for n in order if n in forward], loss) + _cuts(
        graph, [n for n in order if n not in forward], final_output(graph)
    )


def _cuts(graph: Graph, order: list[int], final: int | None) -> list[int]:
    """Cut points among `order`, counting only the uses inside it (see `cut_points`)."""
    position = {node_id: i for i, node_id in enumerate(order)}
    # An equal form of a node (placed right after it) is the same value: it lives and dies
    # with its node, and its operands are read where the node reads them.
    node_of = _equal_form_roots(graph, position)

    def at(node_id: int) -> int:
        return position[node_of.get(node_id, node_id)]

    last_use = {node_id: position[node_id] for node_id in order if node_id not in node_of}
    for node in graph.nodes.values():
        if node.id not in position:
            continue
        for operand in node.operands:
            operand = node_of.get(operand, operand)
            if operand in last_use:
                last_use[operand] = max(last_use[operand], at(node.id))
    # The last output ends the last segment; an output computed earlier (a layer's K and V
    # caches) is proved in its own segment, so it need not stay live to the end.
    if final in last_use:
        last_use[final] = len(order)
    ends_at: dict[int, int] = {}
    for last in last_use.values():
        ends_at[last] = ends_at.get(last, 0) + 1
    # A parameter used at several places (the residual input of a layer stack) is live from
    # its first use to its last; one used once never spans a boundary. For a parameter that
    # a computed node reads (the residual add reads the first layer's input), a use through
    # values every segment copies in (the norm's `convert` of it) counts too: otherwise the
    # first layer is cut where later layers are not, and its proof is never reused for them.
    # (Positions and masks, read only through such values, stay out of the count; see
    # `_computed_readers`.)
    starts_at: dict[int, int] = {}
    for node in graph.nodes.values():
        if node.op != "parameter":
            continue
        uses = sorted(at(u) for u in _computed_readers(graph, node.id, position))
        if len(uses) > 1 or (node.id in graph.outputs and uses):
            starts_at[uses[0]] = starts_at.get(uses[0], 0) + 1
            last = len(order) if node.id in graph.outputs else uses[-1]
            ends_at[last] = ends_at.get(last, 0) + 1
    cuts = []
    live = 0
    for i, node_id in enumerate(order):
        if node_id in node_of:
            continue
        live += 1 + starts_at.get(i, 0)  # node i becomes live (and parameters it starts using)
        live -= ends_at.get(i, 0)  # values whose last use is node i die after it
        # Never cut at a broadcast: its users need it in the same e-graph to fix its sizes.
        if live == 1 and last_use[node_id] > i and graph.node(node_id).op != "broadcast":
            cuts.append(node_id)
    return cuts


def _equal_form_roots(graph: Graph, position: dict[int, int]) -> dict[int, int]:
    """Each computed equal form (a later node of an equality pair) -> the first node of its
    chain of equal forms."""
    root: dict[int, int] = {}
    for a, b in graph.equalities:
        if a in position and b in position and position[b] > position[a]:
            root[b] = root.get(a, a)
    return root


def final_output(graph: Graph) -> int | None:
    """The output computed last (in the graph's order), or None when no output is computed."""
    position = _positions(graph)
    computed = [o for o in graph.outputs if graph.node(o).op != "parameter"]
    return max(computed, key=position.__getitem__, default=None)


def segments(graph: Graph, cuts: list[int]) -> list[Segment]:
    literal = leaf_nodes(graph)
    result: list[Segment] = []
    current: list[int] = []
    entry = None
    boundaries = set(cuts)
    forms = {b: a for a, b in graph.equalities}
    for node in graph.nodes.values():
        if node.op == "parameter" or node.id in literal:
            continue
        if result and forms.get(node.id) == result[-1].exit:
            result[-1].nodes.insert(-1, node.id)  # an equal form of the cut: in its segment
            continue
        current.append(node.id)
        if node.id in boundaries:
            result.append(Segment(current, entry))
            entry, current = node.id, []
    if current:
        result.append(Segment(current, entry))
    return result


def merge_segments(run: list[Segment]) -> Segment:
    """Consecutive segments as one (a cut one graph has and the other lacks)."""
    return Segment([n for seg in run for n in seg.nodes], run[0].entry)


def subgraph(graph: Graph, segment: Segment, label: str) -> Graph:
    """The segment as a graph of its own: the entry cut and the parameters it uses become
    inputs; the literals it uses are copied in. Node ids stay those of `graph`."""
    members = set(segment.nodes)
    literal = leaf_nodes(graph)
    needed_literals: set[int] = set()
    params: set[int] = set()
    stack = [o for n in segment.nodes for o in graph.node(n).operands if o not in members]
    partners = graph.memo("equality_partners", _equality_partners)
    stack += [p for n in segment.nodes for p in partners.get(n, ()) if p not in members]
    sides: set[int] = set()
    while stack:
        node_id = stack.pop()
        node = graph.node(node_id)
        if node_id == segment.entry:
            continue
        if node.op == "parameter":
            params.add(node_id)
        elif node_id in literal:
            if node_id not in needed_literals:
                needed_literals.add(node_id)
                stack.extend(node.operands)
                # an alternative form travels with its node
                stack.extend(partners.get(node_id, ()))
        elif node_id not in members:  # a value an earlier segment made (the backward reads
            sides.add(node_id)  # the forward's): an input, related as proved there
    nodes: dict[int, Node] = {}
    inputs = []
    order = _positions(graph)
    cut = [segment.entry] if segment.entry is not None else []
    for kind, node_id in [("cut", n) for n in cut] + [
        ("side", n) for n in sorted(sides, key=order.__getitem__)
    ]:
        made = graph.node(node_id)
        attrs = {"name": kind, "index": -1}
        nodes[node_id] = Node(
            node_id, "parameter", (), made.shape, made.dtype, attrs, made.loc, made.name
        )
        inputs.append(node_id)
    for node_id in sorted(params | needed_literals | members, key=order.__getitem__):
        nodes[node_id] = graph.node(node_id)
    inputs += sorted(params, key=lambda i: graph.node(i).attrs.get("index", 0))
    first = graph.memo("equalities_by_node", _equalities_by_node)
    pairs = (graph.equalities[k] for k in sorted(k for n in nodes for k in first.get(n, ())))
    equalities = [(a, b) for a, b in pairs if a in nodes and b in nodes]
    return Graph(
        f"{graph.path} [{label}]",
        nodes,
        inputs,
        [segment.exit],
        mesh_hint=graph.mesh_hint,
        num_partitions=graph.num_partitions,
        equalities=equalities,
    )


def _equality_partners(graph: Graph) -> dict[int, list[int]]:
    """Each node's equal forms, every one: a value may have several (a batch x heads view's
    unmerged twin and its view through a broadcast), and a map to one of them lost the
    others, so a forward segment went without the twin that relates it."""
    partners: dict[int, list[int]] = {}
    for a, b in graph.equalities:
        partners.setdefault(a, []).append(b)
        partners.setdefault(b, []).append(a)
    return partners


def _equalities_by_node(graph: Graph) -> dict[int, list[int]]:
    """The positions in `graph.equalities` of the pairs each node is first of."""
    first: dict[int, list[int]] = {}
    for k, (a, _) in enumerate(graph.equalities):
        first.setdefault(a, []).append(k)
    return first


def canonical_order(graph: Graph) -> list[int]:
    """The graph's nodes in an order set by its structure alone: operands before their users,
    depth first from the outputs in operand order, then whatever no output reads (in listing
    order). Two copies of a layer whose nodes are listed in different orders (a mask built
    before or after the RoPE tables) number alike, so the second one's proof is reused."""
    return graph.memo("canonical_order", _canonical_order)


def _canonical_order(graph: Graph) -> list[int]:
    order: list[int] = []
    seen: set[int] = set()
    for root in [*graph.outputs, *graph.nodes]:
        stack = [(root, False)]
        while stack:
            node_id, expanded = stack.pop()
            if expanded:
                order.append(node_id)
                continue
            if node_id in seen:
                continue
            seen.add(node_id)
            stack.append((node_id, True))
            stack += [(o, False) for o in reversed(graph.node(node_id).operands) if o not in seen]
    return order


def structural_key(base: Graph, dist: Graph, relations: list[Relation]) -> str:
    """A hash of what the proof of a segment depends on, not of names or source lines: both
    graphs numbered in `canonical_order`, which is also how a memoised proof's facts are
    placed (equal keys map each position to the same node's counterpart)."""
    text = []
    shift = _slice_shift(base, dist)
    for graph in (base, dist):
        order = canonical_order(graph)
        renumber = {node_id: i for i, node_id in enumerate(order)}
        inputs = {node_id: k for k, node_id in enumerate(graph.inputs)}
        for node in map(graph.node, order):
            attrs = {k: v for k, v in node.attrs.items() if k not in ("name", "index")}
            if node.op == "slice" and node.id in leaf_nodes(graph):
                attrs["starts"] = _shifted(attrs["starts"], shift)
                attrs["limits"] = _shifted(attrs["limits"], shift)
            text.append(
                f"{renumber[node.id]}:{node.op}:{node.dtype}:{node.shape}:"
                f"{inputs.get(node.id, '')}:{sorted(attrs.items())}:"
                f"{[renumber[o] for o in node.operands]}"
            )
        text.append(f"{sorted(sorted((renumber[a], renumber[b])) for a, b in graph.equalities)}")
        text.append("|")
    base_pos = {node_id: k for k, node_id in enumerate(base.inputs)}
    dist_pos = {node_id: k for k, node_id in enumerate(dist.inputs)}
    text += sorted(
        f"{dist_pos[r.dist_id]}~{base_pos[r.base_id]}@{layout_str(canonical(r.layout))}"
        for r in relations
    )
    return hashlib.sha256("\n".join(text).encode()).hexdigest()


def _slice_shift(base: Graph, dist: Graph) -> dict[int, tuple[int, ...]]:
    """Per slice rank and dim, the lowest start of the parameter slices of a segment pair.
    Keys see starts relative to it, so layer k's slices of stacked weights key like layer
    0's: a proof does not depend on where the slices start, only on baseline and distributed
    slices starting at the same place, and one shift for both graphs keeps that."""
    shift: dict[int, tuple[int, ...]] = {}
    for graph in (base, dist):
        for node in graph.nodes.values():
            if node.op == "slice" and node.id in leaf_nodes(graph):
                starts = tuple(node.attrs["starts"])
                low = shift.get(len(starts), starts)
                shift[len(starts)] = tuple(min(a, b) for a, b in zip(low, starts, strict=True))
    return shift


def _shifted(values, shift: dict[int, tuple[int, ...]]) -> tuple[int, ...]:
    by = shift.get(len(values), (0,) * len(values))
    return tuple(v - b for v, b in zip(values, by, strict=True))


def segment_relations(
    base_sub: Graph,
    dist_sub: Graph,
    inputs: list[Relation],
    entry: list[Layout],
    base_entry: int | None,
    proven: dict[int, set] | None = None,
) -> list[Relation]:
    """Global input relations restricted to the segment, plus the proven cut relations and
    those proved of the values it reads from earlier segments (`proven`: distributed node ->
    {(layout, baseline node)})."""
    result = [r for r in inputs if r.dist_id in dist_sub.nodes and r.base_id in base_sub.nodes]
    if base_entry is not None:
        dist_entry = dist_sub.inputs[0]
        result += [
            Relation(dist_entry, base_entry, "cut", layout, "proven at the cut") for layout in entry
        ]
    base_sides = set(side_inputs(base_sub))
    for d in side_inputs(dist_sub):
        result += [
            Relation(d, b, "side", layout, "proven in an earlier segment")
            for layout, b in sorted((proven or {}).get(d, ()), key=lambda p: (p[1], str(p[0])))
            if b in base_sides
        ]
    return result


def side_inputs(graph: Graph) -> list[int]:
    """A segment's inputs that an earlier segment made, other than its cut."""
    return [i for i in graph.inputs if graph.node(i).attrs.get("name") == "side"]


def _computed_readers(graph: Graph, node_id: int, position: dict[int, int]) -> set[int]:
    """The nodes of `position` that read `node_id` directly, and, when there are any, those
    before the first of them that read it through leaf values (`leaf_nodes`, such as a
    cast of it). Later ones do not extend its life: a tied embedding's transposed
    view, read by the head, would otherwise keep it live through every layer."""
    found = {u for u in _users_of(graph, node_id) if u in position}
    if not found:
        return found
    leaves = leaf_nodes(graph)
    first = min(position[u] for u in found)
    seen = {node_id}
    stack = [node_id]
    while stack:
        for user in _users_of(graph, stack.pop()):
            if user in position:
                found |= {user} if position[user] < first else set()
            elif user not in seen and user in leaves:
                seen.add(user)
                stack.append(user)
    return found


def _users_of(graph: Graph, node_id: int) -> list[int]:
    return graph.memo("users", Graph.users)[node_id]


def _positions(graph: Graph) -> dict[int, int]:
    return graph.memo("positions", lambda g: {node_id: i for i, node_id in enumerate(g.nodes)})
