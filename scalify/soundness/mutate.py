"""Mutation testing: small edits to correct distributed graphs, each a plausible silent bug.

Every mutant that the simulator shows to differ from the baseline must not be proved
equivalent; a mutant proved equivalent while it differs is a soundness bug in the verifier.
"""

from __future__ import annotations

import copy
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from functools import partial

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


@dataclass
class Outcome:
    """What simulating and verifying one mutant gave."""

    simulable: bool
    differing: bool = False
    verdict: str = ""
    located: bool = False  # the mutant names the lines a report should point at
    first_at_line: bool = False
    first_own_line: bool = False
    top3_at_line: bool = False
    first: tuple[str, int] | None = None  # the first suspect's own line
    reason: str = ""  # ... and its reason
    seconds: float = 0.0  # verifying it


class Judge:
    """Simulates and verifies mutants of one correct pair, every mutant held to the layouts
    the unmutated pair gives its inputs and outputs."""

    def __init__(self, base: Graph, dist: Graph, rules, mesh: Mesh, given=None) -> None:
        from scalify.layout import layout_str
        from scalify.relations import RelationsFile, output_relations
        from scalify.verify import inferred_input_relations

        self.base, self.rules, self.mesh = base, rules, mesh
        self.inputs = inferred_input_relations(base, dist, mesh, given)
        self.outputs = output_relations(base, dist, mesh, given, self.inputs)
        # a mutant of an output node loses the annotation that stated its layout
        stated = given or RelationsFile("<mutant>", None, {}, None)
        if stated.outputs is None:
            stated = replace(stated, outputs=[layout_str(r.layout) for r in self.outputs])
        self.stated = stated

    def differs(self, mutant: Mutant) -> bool | None:
        """Whether the simulator shows `mutant` depart from the baseline; None when it
        cannot run it."""
        from scalify.simulate import NotSimulable, simulate

        graph = mutant.graph
        outs = [replace(r, dist_id=graph.outputs[i]) for i, r in enumerate(self.outputs)]
        try:
            mismatch = simulate(self.base, graph, self.mesh, self.inputs, outs, seed=1)
        except (NotSimulable, ValueError, IndexError):
            return None
        return mismatch is not None

    def verify(self, mutant: Mutant) -> Outcome:
        """The proof alone decides (no numeric check): a differing mutant must not be
        proved, and its first suspect should be on the mutated line."""
        from scalify.verify import Limits, verify_graphs

        start = time.perf_counter()
        report = verify_graphs(
            self.base,
            mutant.graph,
            self.rules,
            self.mesh,
            self.stated,
            limits=Limits(simulate=False),
        )
        out = Outcome(True, True, report.verdict, located=bool(mutant.sites))
        out.seconds = round(time.perf_counter() - start, 2)
        if report.suspects:
            out.first = report.suspects[0].sites()[0]
            out.reason = report.suspects[0].reason
        if report.verdict != "equivalent" and mutant.sites:
            hits = [any(line in mutant.sites for line in s.sites()) for s in report.suspects[:3]]
            out.first_at_line = bool(hits) and hits[0]
            out.first_own_line = bool(hits) and out.first in mutant.sites
            out.top3_at_line = any(hits)
        return out

    def __call__(self, mutant: Mutant) -> Outcome:
        differs = self.differs(mutant)
        if differs is None:
            return Outcome(False)
        if not differs:
            return Outcome(True)
        return self.verify(mutant)


def score(base: Graph, dist: Graph, rules, mesh: Mesh, given=None) -> MutationScore:
    """Verify and simulate every mutant of `dist`."""
    judge = Judge(base, dist, rules, mesh, given)
    result = MutationScore()
    for mutant in mutants(dist, mesh):
        result.tried += 1
        out = judge(mutant)
        if not out.simulable:
            result.not_simulable += 1
            continue
        if not out.differing:
            continue
        result.differing += 1
        if out.verdict == "equivalent":
            result.wrongly_proved.append(f"{dist.path}: {mutant.description}")
            continue
        result.caught += 1
        if out.located:
            result.located += 1
            result.first_at_line += out.first_at_line
            result.first_own_line += out.first_own_line
            result.top3_at_line += out.top3_at_line
    return result


# The mutation family of issue 36, over the real frameworks' partitioned graphs: five kinds
# of one small edit each, every one keeping the program well-typed (same shapes), so that
# what the simulator shows differ is a silent bug a user could ship.
FAMILY = ("drop", "subset groups", "swap reduce", "transpose", "device shift")


@dataclass
class Candidate:
    """A mutant not yet built: deep-copying a real graph for every possible edit costs more
    than simulating the few a run samples, so the copy waits for `build`."""

    kind: str
    node: int
    description: str
    build: Callable[[], Mutant]


def family(graph: Graph, mesh: Mesh) -> Iterator[Candidate]:
    """Every single edit of `graph` of the five kinds in `FAMILY`."""
    users: dict[int, list[Node]] = {}
    for node in graph.nodes.values():
        for operand in set(node.operands):
            users.setdefault(operand, []).append(node)
    for node in list(graph.nodes.values()):
        yield from _drops(graph, node)
        yield from _subsets(graph, node, mesh)
        yield from _swapped_reducers(graph, node)
        yield from _transposes(graph, node)
        if node.op == "rank_index":
            for user in users.get(node.id, []):
                yield Candidate(
                    "device shift",
                    user.id,
                    f"`{user.name}` reads the next device's index",
                    partial(_shift_device, graph, node.id, user.id, mesh.size),
                )


def _build(graph: Graph, node: Node, description: str, edit, sites) -> Mutant:
    """A copy of `graph` with `edit(copy, copied node)` applied."""
    g = _copy(graph)
    edit(g, g.nodes[node.id])
    return Mutant(description, g, sites)


def _dropped(g: Graph, node: Node) -> None:
    _redirect(g, node.id, node.operands[0], skip=-1)
    del g.nodes[node.id]


def _drops(graph: Graph, node: Node) -> Iterator[Candidate]:
    """A collective replaced by its operand where that keeps the shape: the all-reduce of a
    partial sum, a permute (each device keeps its own block), a square all-to-all."""
    if node.op not in ("all_reduce", "collective_permute", "all_to_all"):
        return
    operand = graph.node(node.operands[0])
    if operand.shape != node.shape:
        return
    what = f"drop {node.op} `{node.name}`"
    # a dropped all-reduce is also fixed where the partial sum it completes is made
    sites = _sites(node, operand) if node.op == "all_reduce" else _sites(node)
    yield Candidate("drop", node.id, what, partial(_build, graph, node, what, _dropped, sites))


def _subset_groups(node: Node, mesh: Mesh) -> Iterator[tuple[str, tuple]]:
    """Replica groups each inside one of `node`'s: one axis of several reduced over, or
    half of each group."""
    groups = tuple(tuple(g) for g in node.attrs.get("groups", ())) or (tuple(range(mesh.size)),)
    owner = {d: set(g) for g in groups for d in g}
    seen = {groups}
    for axis in mesh.names:
        candidate = mesh.groups((axis,))
        inside = all(set(g) < owner.get(g[0], set()) for g in candidate if len(g) > 1)
        if candidate not in seen and inside and any(len(g) > 1 for g in candidate):
            seen.add(candidate)
            yield f"groups of {axis} only", candidate
    if all(len(g) % 2 == 0 for g in groups):
        halves = tuple(h for g in groups for h in (g[: len(g) // 2], g[len(g) // 2 :]))
        if halves not in seen:
            yield "half of each group", halves


def _with_attr(key: str, value) -> Callable[[Graph, Node], None]:
    def edit(g: Graph, node: Node) -> None:
        node.attrs[key] = value

    return edit


def _subsets(graph: Graph, node: Node, mesh: Mesh) -> Iterator[Candidate]:
    """A collective over fewer devices than it must span; only where the shape stays (an
    all-gather or reduce-scatter over fewer devices would not type)."""
    square_a2a = node.op == "all_to_all" and node.attrs.get(
        "split_dim", node.attrs.get("dim")
    ) == node.attrs.get("concat_dim", node.attrs.get("dim"))
    if node.op == "all_reduce" or square_a2a:
        for what, groups in _subset_groups(node, mesh):
            text = f"{node.op} `{node.name}` over {what}"
            edit = _with_attr("groups", groups)
            yield Candidate(
                "subset groups",
                node.id,
                text,
                partial(_build, graph, node, text, edit, _sites(node)),
            )
    moved = [p for p in node.attrs.get("pairs", ()) if p[0] != p[1]]
    if node.op == "collective_permute" and len(moved) > 1:
        kept = tuple(moved[: len(moved) // 2]) + tuple(
            p for p in node.attrs["pairs"] if p[0] == p[1]
        )
        text = f"collective_permute `{node.name}` with half its moves"
        edit = _with_attr("pairs", kept)
        yield Candidate(
            "subset groups", node.id, text, partial(_build, graph, node, text, edit, _sites(node))
        )


def _swapped_reducers(graph: Graph, node: Node) -> Iterator[Candidate]:
    """A reducing collective with `max` for `sum` or the reverse."""
    if node.op not in ("all_reduce", "reduce_scatter"):
        return
    swapped = {"sum": "max", "max": "sum"}.get(node.attrs.get("op", ""))
    if swapped:
        text = f"{node.op} `{node.name}` with {swapped} instead of {node.attrs['op']}"
        edit = _with_attr("op", swapped)
        yield Candidate(
            "swap reduce", node.id, text, partial(_build, graph, node, text, edit, _sites(node))
        )


def _transposes(graph: Graph, node: Node) -> Iterator[Candidate]:
    """A transpose with two of its equal-sized output dims exchanged."""
    if node.op != "transpose":
        return
    perm = list(node.attrs["perm"])
    for i in range(len(perm)):
        for j in range(i + 1, len(perm)):
            if node.shape[i] == node.shape[j]:
                new = list(perm)
                new[i], new[j] = new[j], new[i]
                text = f"transpose `{node.name}` with perm {new}"
                edit = _with_attr("perm", tuple(new))
                yield Candidate(
                    "transpose",
                    node.id,
                    text,
                    partial(_build, graph, node, text, edit, _sites(node)),
                )


def _shift_device(graph: Graph, rank: int, user: int, devices: int) -> Mutant:
    """`user` reads (rank + 1) mod devices for the device's index: an off-by-one in the
    device order, so each device computes the block or offset of its neighbour."""
    g = _copy(graph)
    index, reader = g.nodes[rank], g.nodes[user]
    one = _derived(g, reader, "constant", (), (), index.dtype, {"value": "1"}, "one")
    _insert_before(g, user, one)
    count = _derived(g, reader, "constant", (), (), index.dtype, {"value": str(devices)}, "n")
    _insert_before(g, user, count)
    bumped = _derived(g, reader, "add", (rank, one.id), (), index.dtype, {}, "next")
    _insert_before(g, user, bumped)
    wrapped = _derived(g, reader, "rem", (bumped.id, count.id), (), index.dtype, {}, "wrap")
    _insert_before(g, user, wrapped)
    reader.operands = tuple(wrapped.id if o == rank else o for o in reader.operands)
    return Mutant(f"`{reader.name}` reads the next device's index", g, _sites(reader))


def sample_family(
    judge: Judge, graph: Graph, mesh: Mesh, per_kind: int, tries: int, seed: int
) -> Iterator[tuple[Candidate, Mutant, Outcome]]:
    """For each kind of `FAMILY`, candidates in a pseudo-random order (`seed`), simulated
    until `per_kind` differ or `tries` were made: a real graph has hundreds of candidates,
    and a sample of each kind is what a run can afford to verify."""
    candidates = list(family(graph, mesh))
    random.Random(seed).shuffle(candidates)
    for kind in FAMILY:
        found = tried = 0
        for candidate in (c for c in candidates if c.kind == kind):
            if found >= per_kind or tried >= tries:
                break
            tried += 1
            mutant = candidate.build()
            out = judge(mutant)
            found += out.differing
            yield candidate, mutant, out
