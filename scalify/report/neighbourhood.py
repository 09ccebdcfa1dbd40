"""The small subgraph around a suspect, on both sides, for the report's picture.

Distributed side: the suspect and the nodes within `HOPS` steps of it (operands and users),
nearest first, at most `MAX_NODES`. Baseline side: the baseline nodes that those distributed
nodes were proven related to, plus their direct users and operands (where the baseline does
what the distributed graph failed to), at most `MAX_NODES`. When no distributed node shown is
related to the baseline, the baseline side falls back to the nodes from the suspect's source
line, and says so in `baseline_basis`. Nothing here guesses a correspondence the proof did
not establish.
"""

from __future__ import annotations

from collections.abc import Iterable

from scalify.ir import Graph, Node, feeding
from scalify.layout import Layout, canonical, layout_str
from scalify.report.model import Neighbourhood, PictureNode

MAX_NODES = 12
HOPS = 2
RELATED_PER_NODE = 2  # baseline partners listed (and drawn) per distributed node

Proven = dict[int, set[tuple[Layout, int]]]


def neighbourhood(
    suspect: int, dist: Graph, base: Graph, proven: Proven, replicated: Iterable[int] = ()
) -> Neighbourhood:
    """Both sides of the picture for the distributed node `suspect`."""
    near, dist_hidden = _nearby(dist, suspect)
    replicated = set(replicated)
    dist_nodes = [
        _picture(dist.node(i), role, near, _dist_relation(i, dist, base, proven, replicated))
        for i, role in near.items()
    ]
    seeds = _partners(near, proven)
    basis = "baseline nodes the distributed nodes shown are proven related to, with their users"
    if not seeds:
        seeds = _same_line(base, dist.node(suspect))
        basis = (
            "no distributed node shown is related to the baseline; these baseline nodes "
            "come from the suspect's source line"
            if seeds
            else "no distributed node shown is related to the baseline, and no baseline node "
            "comes from the suspect's source line"
        )
    chosen, base_hidden = _around(base, seeds)
    partners = _partner_names(near, dist, proven)
    base_nodes = [
        _picture(base.node(i), role, chosen, partners.get(i, "")) for i, role in chosen.items()
    ]
    return Neighbourhood(dist_nodes, base_nodes, basis, dist_hidden + base_hidden)


def _feeding_outputs(graph: Graph) -> set[int]:
    """Nodes the outputs depend on: alternative forms that nothing uses are not drawn."""

    return graph.memo("feeding_outputs", lambda g: feeding(g, g.outputs))


def _nearby(graph: Graph, start: int) -> tuple[dict[int, str], int]:
    """Breadth-first over operands then users, up to HOPS steps and MAX_NODES nodes; returns
    {id: role} in discovery order and how many reachable nodes were left out."""
    users = graph.memo("users", Graph.users)
    live = _feeding_outputs(graph)
    found = {start: "suspect"}
    frontier, hidden = [start], set()
    for hop in range(1, HOPS + 1):
        next_frontier = []
        for node_id in frontier:
            steps = [(o, "operand") for o in graph.node(node_id).operands]
            steps += [(u, "user") for u in users.get(node_id, ()) if u in live]
            for other, role in steps:
                if other in found:
                    continue
                if len(found) >= MAX_NODES:
                    hidden.add(other)
                    continue
                found[other] = role if hop == 1 else "nearby"
                next_frontier.append(other)
        frontier = next_frontier
    return found, len(hidden - found.keys())


def _partners(near: dict[int, str], proven: Proven) -> list[int]:
    """Baseline nodes related to the distributed nodes shown, suspect's neighbours first."""
    seeds: list[int] = []
    for node_id in near:
        for base_id in sorted({b for _, b in proven.get(node_id, ())})[:RELATED_PER_NODE]:
            if base_id not in seeds:
                seeds.append(base_id)
    return seeds


def _same_line(base: Graph, node: Node) -> list[int]:
    if not node.loc:
        return []
    return [
        n.id
        for n in base.nodes.values()
        if n.loc and (n.loc.file, n.loc.line) == (node.loc.file, node.loc.line)
    ][:MAX_NODES]


def _around(graph: Graph, seeds: list[int]) -> tuple[dict[int, str], int]:
    """The seeds (role related), then their users and operands (role context), bounded."""
    users = graph.memo("users", Graph.users)
    live = _feeding_outputs(graph)
    chosen = {s: "related" for s in seeds[:MAX_NODES]}
    extra = [u for s in seeds for u in users.get(s, ()) if u in live]
    extra += [o for s in seeds for o in graph.node(s).operands]
    wanted = [n for n in dict.fromkeys(extra) if n not in chosen]
    room = max(MAX_NODES - len(chosen), 0)
    chosen.update({n: "context" for n in wanted[:room]})
    hidden = max(len(seeds) - MAX_NODES, 0) + max(len(wanted) - room, 0)
    position = graph.memo("positions", lambda g: {n: i for i, n in enumerate(g.nodes)})
    return dict(sorted(chosen.items(), key=lambda kv: position[kv[0]])), hidden


def _dist_relation(
    node_id: int, dist: Graph, base: Graph, proven: Proven, replicated: set[int]
) -> str:
    pairs = sorted(
        {(layout_str(canonical(lay)), base.node(b).name) for lay, b in proven.get(node_id, ())}
    )
    if pairs:
        text = " | ".join(f"{lay} of `{name}`" for lay, name in pairs[:RELATED_PER_NODE])
        more = len(pairs) - RELATED_PER_NODE
        return text + (f" (+{more} more)" if more > 0 else "")
    if node_id in replicated:
        return "the same on every device (no baseline node)"
    if dist.node(node_id).op in ("constant", "iota"):
        return "a literal"
    return "unrelated to the baseline"


def _partner_names(near: dict[int, str], dist: Graph, proven: Proven) -> dict[int, str]:
    """For each baseline node, which distributed nodes shown are related to it, and how."""
    names: dict[int, list[str]] = {}
    for node_id in near:
        for lay, b in sorted(proven.get(node_id, ()), key=lambda p: (p[1], str(p[0]))):
            text = f"{layout_str(canonical(lay))} in `{dist.node(node_id).name}`"
            if text not in names.setdefault(b, []):
                names[b].append(text)
    return {b: "related: " + "; ".join(texts[:3]) for b, texts in names.items()}


def _picture(node: Node, role: str, shown: dict[int, str], relation: str) -> PictureNode:
    op = node.op
    if op == "parameter" and node.attrs.get("name"):
        op = f"parameter {node.attrs['name']}"
    return PictureNode(
        id=node.id,
        name=node.name,
        op=op,
        shape=f"{node.dtype}[{','.join(map(str, node.shape))}]",
        operands=[o for o in dict.fromkeys(node.operands) if o in shown],
        role=role,
        relation=relation,
        line=node.loc.line if node.loc else 0,
    )
