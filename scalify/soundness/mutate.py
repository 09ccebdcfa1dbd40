"""Mutation testing: small edits to correct distributed graphs, each a plausible silent bug.

Every mutant that the simulator shows to differ from the baseline must not be proved
equivalent; a mutant proved equivalent while it differs is a soundness bug in the verifier.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from scalify.ir import Graph, Node
from scalify.mesh import Mesh

NON_COMMUTATIVE = ("sub", "div", "pow", "atan2", "rem")


@dataclass
class Mutant:
    description: str
    graph: Graph
    # the lines a report should point at: the mutated op's, and for a dropped collective
    # also the line of the value it should have reduced
    sites: tuple[tuple[str, int], ...] = ()


@dataclass
class MutationScore:
    tried: int = 0
    differing: int = 0
    caught: int = 0
    wrongly_proved: list[str] = field(default_factory=list)
    not_simulable: int = 0
    located: int = 0  # caught mutants whose mutated op has a source line
    first_at_line: int = 0  # ... whose first suspect is on it (its own line or its second)
    first_own_line: int = 0  # ... whose first suspect's own line is it
    top3_at_line: int = 0  # ... with it among the first three suspects

    def add(self, other: MutationScore) -> None:
        self.tried += other.tried
        self.differing += other.differing
        self.caught += other.caught
        self.wrongly_proved += other.wrongly_proved
        self.not_simulable += other.not_simulable
        self.located += other.located
        self.first_at_line += other.first_at_line
        self.first_own_line += other.first_own_line
        self.top3_at_line += other.top3_at_line

    def line(self) -> str:
        return (
            f"tried {self.tried}, differing {self.differing}, caught {self.caught}, "
            f"wrongly proved {len(self.wrongly_proved)}, not simulable {self.not_simulable}; "
            f"localised: first suspect at the line {self.first_at_line}/{self.located} "
            f"(on its own line {self.first_own_line}), "
            f"in the first three {self.top3_at_line}/{self.located}"
        )


def _copy(graph: Graph) -> Graph:
    """A copy to mutate; facts derived from the original do not hold for it."""
    clone = copy.deepcopy(graph)
    clone.derived.clear()
    return clone


def _fresh_id(graph: Graph) -> int:
    return max(graph.nodes) + 1


def _redirect(graph: Graph, old: int, new: int, skip: int) -> None:
    for node in graph.nodes.values():
        if node.id != skip:
            node.operands = tuple(new if o == old else o for o in node.operands)
    graph.outputs = [new if o == old else o for o in graph.outputs]


def _insert_after(graph: Graph, anchor: int, new: Node) -> None:
    """Put `new` right after `anchor` in topological order and give it anchor's users."""
    nodes = {}
    for node_id, node in graph.nodes.items():
        nodes[node_id] = node
        if node_id == anchor:
            nodes[new.id] = new
    graph.nodes = nodes
    _redirect(graph, anchor, new.id, skip=new.id)


def _insert_before(graph: Graph, anchor: int, new: Node) -> None:
    """Put `new` right before `anchor` in topological order; no operand changes."""
    nodes = {}
    for node_id, node in graph.nodes.items():
        if node_id == anchor:
            nodes[new.id] = new
        nodes[node_id] = node
    graph.nodes = nodes


def _derived(
    g: Graph,
    like: Node,
    op: str,
    operands: tuple[int, ...],
    shape,
    dtype: str,
    attrs: dict,
    suffix: str,
) -> Node:
    """A new node for a mutation, at the source line of the node it mutates."""
    return Node(
        _fresh_id(g), op, operands, tuple(shape), dtype, attrs, like.loc, _named(like, suffix)
    )


def _named(node: Node, suffix: str) -> str:
    return f"{node.name}.{suffix}"


def _other_groups(node: Node, mesh: Mesh) -> Iterator[tuple[str, tuple]]:
    groups = tuple(tuple(g) for g in node.attrs.get("groups", ()))
    for axis in mesh.names:
        candidate = mesh.groups((axis,))
        if candidate != groups:
            yield f"groups of {axis}", candidate
    members = groups or (tuple(range(mesh.size)),)
    if all(len(g) % 2 == 0 and len(g) > 1 for g in members):
        halves = tuple(h for g in members for h in (g[: len(g) // 2], g[len(g) // 2 :]))
        yield "half the group", halves
    if members and len(members[0]) > 2:
        yield "reversed group order", tuple(tuple(reversed(g)) for g in members)


def mutants(graph: Graph, mesh: Mesh) -> Iterator[Mutant]:
    """All single mutations of `graph` this module knows how to make."""
    for node in list(graph.nodes.values()):
        yield from _collective_mutants(graph, node, mesh)
        if node.op in NON_COMMUTATIVE and node.operands[0] != node.operands[1]:
            g = _copy(graph)
            g.nodes[node.id].operands = tuple(reversed(node.operands))
            yield Mutant(f"swap the operands of {node.op} `{node.name}`", g, _sites(node))
        if node.dtype in ("f32", "f64") and node.op in ("dot", "add", "mul", "reduce"):
            g = _copy(graph)
            down = _derived(g, node, "convert", (node.id,), node.shape, "bf16", {}, "bf16")
            _insert_after(g, node.id, down)
            up = _derived(g, node, "convert", (down.id,), node.shape, node.dtype, {}, "f32")
            _insert_after(g, down.id, up)
            yield Mutant(f"round `{node.name}` through bf16", g, _sites(node))
        if node.op == "transpose" and len(set(node.shape)) < len(node.shape):
            perm = list(node.attrs["perm"])
            for i in range(len(perm)):
                for j in range(i + 1, len(perm)):
                    if node.shape[i] == node.shape[j]:
                        g = _copy(graph)
                        new = list(perm)
                        new[i], new[j] = new[j], new[i]
                        g.nodes[node.id].attrs["perm"] = tuple(new)
                        yield Mutant(f"transpose `{node.name}` with perm {new}", g, _sites(node))


def _sites(*nodes: Node) -> tuple[tuple[str, int], ...]:
    return tuple((n.loc.file, n.loc.line) for n in nodes if n.loc is not None)


def _early_cast(graph: Graph, node: Node) -> Iterator[Mutant]:
    """`narrow(all_reduce(p))` becomes `all_reduce(narrow(p))`: the partials are rounded and
    summed in the narrow type (published bug B21)."""
    users = [u for u in graph.nodes.values() if node.id in u.operands]
    if (
        len(users) != 1
        or users[0].op != "convert"
        or users[0].dtype not in ("bf16", "f16")
        or node.dtype not in ("f32", "f64")
        or node.id in graph.outputs
    ):
        return
    g = _copy(graph)
    cast, reduce_ = g.nodes[users[0].id], g.nodes[node.id]
    operand = g.nodes[reduce_.operands[0]]
    early = _derived(g, node, "convert", (operand.id,), operand.shape, cast.dtype, {}, "early")
    _insert_before(g, node.id, early)
    reduce_.operands, reduce_.dtype = (early.id,), cast.dtype
    _redirect(g, cast.id, reduce_.id, skip=-1)
    del g.nodes[cast.id]
    yield Mutant(
        f"cast to {cast.dtype} before all_reduce `{node.name}` (summed in {cast.dtype})",
        g,
        _sites(node, users[0]),
    )


def _collective_mutants(graph: Graph, node: Node, mesh: Mesh) -> Iterator[Mutant]:
    if node.op not in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all"):
        return
    for what, groups in _other_groups(node, mesh):
        g = _copy(graph)
        g.nodes[node.id].attrs["groups"] = groups
        yield Mutant(f"{node.op} `{node.name}` over {what}", g, _sites(node))
    if node.op != "all_reduce":
        return
    yield from _early_cast(graph, node)
    swapped = {"sum": "max", "max": "sum"}.get(node.attrs.get("op", ""))
    if swapped:
        g = _copy(graph)
        g.nodes[node.id].attrs["op"] = swapped
        yield Mutant(
            f"all_reduce `{node.name}` with {swapped} instead of {node.attrs['op']}",
            g,
            _sites(node),
        )
    g = _copy(graph)
    _redirect(g, node.id, node.operands[0], skip=-1)
    del g.nodes[node.id]
    yield Mutant(f"drop all_reduce `{node.name}`", g, _sites(node, graph.node(node.operands[0])))
    g = _copy(graph)
    twice = _derived(
        g, node, "all_reduce", (node.id,), node.shape, node.dtype, dict(node.attrs), "again"
    )
    _insert_after(g, node.id, twice)
    yield Mutant(f"all_reduce `{node.name}` applied twice", g, _sites(node))
    g = _copy(graph)
    operand = g.nodes[node.operands[0]]
    one = _derived(g, node, "constant", (), (), operand.dtype, {"value": "1"}, "one")
    _insert_before(g, node.id, one)
    fill = _derived(
        g, node, "broadcast", (one.id,), operand.shape, operand.dtype, {"dims": ()}, "fill"
    )
    _insert_before(g, node.id, fill)
    bumped = _derived(
        g, node, "add", (operand.id, fill.id), operand.shape, operand.dtype, {}, "bumped"
    )
    _insert_before(g, node.id, bumped)
    g.nodes[node.id].operands = (bumped.id,)
    yield Mutant(f"add a constant to the partial sum before `{node.name}`", g, _sites(node))


def score(base: Graph, dist: Graph, rules, mesh: Mesh, given=None) -> MutationScore:
    """Verify and simulate every mutant of `dist`."""
    from scalify.layout import layout_str
    from scalify.relations import RelationsFile, output_relations
    from scalify.simulate import NotSimulable, simulate
    from scalify.verify import Limits, inferred_input_relations, verify_graphs

    inputs = inferred_input_relations(base, dist, mesh, given)
    outputs = output_relations(base, dist, mesh, given, inputs)
    # every mutant is held to the outputs' layouts of the unmutated graph (a mutant of an
    # output node loses the annotation that stated it)
    stated = given or RelationsFile("<mutant>", None, {}, None)
    if stated.outputs is None:
        stated = replace(stated, outputs=[layout_str(r.layout) for r in outputs])
    result = MutationScore()
    for mutant in mutants(dist, mesh):
        result.tried += 1
        outs = [replace(r, dist_id=mutant.graph.outputs[i]) for i, r in enumerate(outputs)]
        try:
            mismatch = simulate(base, mutant.graph, mesh, inputs, outs, seed=1)
        except (NotSimulable, ValueError, IndexError):
            result.not_simulable += 1
            continue
        if mismatch is None:
            continue
        result.differing += 1
        report = verify_graphs(
            base, mutant.graph, rules, mesh, stated, limits=Limits(simulate=False)
        )
        if report.verdict == "equivalent":
            result.wrongly_proved.append(f"{dist.path}: {mutant.description}")
            continue
        result.caught += 1
        if mutant.sites:
            hits = [any(line in mutant.sites for line in s.sites()) for s in report.suspects[:3]]
            result.located += 1
            result.first_at_line += bool(hits) and hits[0]
            result.first_own_line += bool(hits) and report.suspects[0].sites()[0] in mutant.sites
            result.top3_at_line += any(hits)
    return result
