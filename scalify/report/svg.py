"""A small graph as inline SVG: layered layout computed here, so the page needs no script.

Layers by longest path from a source (data flows downwards), then each node moved down to
just above its nearest user; nodes ordered within a layer by
the mean position of their neighbours (a few barycentre sweeps), which keeps edges short and
mostly uncrossed for the dozen nodes a suspect's neighbourhood has.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from scalify.report.model import PictureNode

BOX_W, BOX_H = 180, 56
GAP_X, GAP_Y, PAD = 22, 44, 10
LABEL_CHARS = 24
SWEEPS = 3

Edges = dict[int, list[int]]


def layered_layout(nodes: Sequence[tuple[int, Sequence[int]]]) -> dict[int, tuple[int, int]]:
    """(layer, position in layer) per node id; `nodes` is (id, operand ids), operands that
    are not listed are ignored. Layer = longest path from a node without operands."""
    ids = [node_id for node_id, _ in nodes]
    known = set(ids)
    preds: Edges = {n: [o for o in dict.fromkeys(ops) if o in known] for n, ops in nodes}
    succs: Edges = {n: [] for n in ids}
    for node_id in ids:
        for operand in preds[node_id]:
            succs[operand].append(node_id)
    layer_of = _pull_down(ids, _longest_path_layers(ids, preds), succs)
    layers: list[list[int]] = [[] for _ in range(max(layer_of.values(), default=-1) + 1)]
    for node_id in ids:
        layers[layer_of[node_id]].append(node_id)
    for sweep in range(SWEEPS):
        if sweep % 2 == 0:
            _sweep(layers, preds)
        else:
            _sweep(layers[::-1], succs)
    return {n: (k, i) for k, layer in enumerate(layers) for i, n in enumerate(layer)}


def _longest_path_layers(ids: list[int], preds: Edges) -> dict[int, int]:
    """Iterative, and safe on a cycle (it cannot occur in SSA, but a picture must not hang)."""
    layer: dict[int, int] = {}
    for root in ids:
        stack, on_path = [root], {root}
        while stack:
            node_id = stack[-1]
            pending = [p for p in preds[node_id] if p not in layer and p not in on_path]
            if pending:
                stack.append(pending[0])
                on_path.add(pending[0])
                continue
            done = [layer[p] for p in preds[node_id] if p in layer]
            layer[node_id] = 1 + max(done) if done else 0
            on_path.discard(stack.pop())
    return layer


def _pull_down(ids: list[int], layer: dict[int, int], succs: Edges) -> dict[int, int]:
    """Move every node with users to just above its nearest user, so that an operand (a
    parameter, a broadcast) sits next to where it is used instead of at the top with a long
    edge crossing other boxes. Users first, so a chain moves down together."""
    for node_id in sorted(ids, key=lambda n: -layer[n]):
        below = [layer[u] for u in succs[node_id]]
        if below:
            layer[node_id] = max(layer[node_id], min(below) - 1)
    return layer


def _sweep(layers: list[list[int]], neighbours: Edges) -> None:
    """Reorder each layer after the first by the mean position of its already-placed
    neighbours; a node without any keeps its place (the sort is stable)."""
    if not layers:
        return
    position = {n: i for i, n in enumerate(layers[0])}
    for layer in layers[1:]:
        keys = {n: _barycentre(neighbours[n], position, i) for i, n in enumerate(layer)}
        layer.sort(key=keys.__getitem__)
        position.update({n: i for i, n in enumerate(layer)})


def _barycentre(neighbours: list[int], position: dict[int, int], default: int) -> float:
    placed = [position[n] for n in neighbours if n in position]
    return sum(placed) / len(placed) if placed else float(default)


def render_svg(nodes: list[PictureNode], label: str, prefix: str) -> str:
    """`nodes` as boxes (op, shape, name) with arrows from operand to user; `prefix` keeps
    element ids unique when a page holds several pictures."""
    places = layered_layout([(n.id, n.operands) for n in nodes])
    widest = max((pos for _, pos in places.values()), default=0) + 1
    counts: dict[int, int] = {}
    for layer, _ in places.values():
        counts[layer] = counts.get(layer, 0) + 1
    width = 2 * PAD + widest * BOX_W + (widest - 1) * GAP_X
    height = 2 * PAD + (max(counts, default=0) + 1) * (BOX_H + GAP_Y) - GAP_Y

    def corner(node_id: int) -> tuple[float, float]:
        layer, pos = places[node_id]
        shift = (widest - counts[layer]) * (BOX_W + GAP_X) / 2
        return PAD + shift + pos * (BOX_W + GAP_X), PAD + layer * (BOX_H + GAP_Y)

    corners = {n.id: corner(n.id) for n in nodes}
    edges = [
        _edge(corners[o], corners[n.id], k, len(n.operands), prefix)
        for n in nodes
        for k, o in enumerate(n.operands)
    ]
    boxes = [_box(n, *corners[n.id]) for n in nodes]
    return (
        f'<svg class="graph" viewBox="0 0 {width:.0f} {height:.0f}" width="{width:.0f}" '
        f'height="{height:.0f}" role="img" aria-label="{escape(label)}">'
        f'<defs><marker id="{prefix}-arrow" viewBox="0 0 10 10" refX="10" refY="5" '
        'markerWidth="7" markerHeight="7" orient="auto-start-reverse">'
        '<path d="M0,0 L10,5 L0,10 z" fill="#555"/></marker></defs>'
        + "".join(edges)
        + "".join(boxes)
        + "</svg>"
    )


def _edge(start: tuple[float, float], end: tuple[float, float], k: int, n: int, prefix: str):
    """A curve from the bottom of the operand's box to the top of the user's, operands
    spread along the user's top edge in operand order."""
    x1, y1 = start[0] + BOX_W / 2, start[1] + BOX_H
    x2, y2 = end[0] + BOX_W * (k + 1) / (n + 1), end[1]
    bend = max((y2 - y1) / 2, GAP_Y / 2)
    return (
        f'<path class="edge" d="M{x1:.1f},{y1:.1f} C{x1:.1f},{y1 + bend:.1f} '
        f'{x2:.1f},{y2 - bend:.1f} {x2:.1f},{y2:.1f}" fill="none" stroke="#555" '
        f'stroke-width="1.4" marker-end="url(#{prefix}-arrow)"/>'
    )


def _clip(text: str) -> str:
    return text if len(text) <= LABEL_CHARS else text[: LABEL_CHARS - 1] + "…"


def _box(node: PictureNode, x: float, y: float) -> str:
    unrelated = "unrelated" in node.relation
    classes = f"node role-{node.role}" + (" unrelated" if unrelated else "")
    tip = f"{node.name}: {node.relation}" if node.relation else node.name
    cx = x + BOX_W / 2
    lines = [
        (18, "op", node.op),
        (34, "shape", node.shape),
        (49, "name", node.name),
    ]
    texts = "".join(
        f'<text class="{cls}" x="{cx:.1f}" y="{y + dy:.1f}" text-anchor="middle">'
        f"{escape(_clip(text))}</text>"
        for dy, cls, text in lines
    )
    return (
        f'<g class="{classes}" data-node="{escape(node.name)}"><title>{escape(tip)}</title>'
        f'<rect x="{x:.1f}" y="{y:.1f}" width="{BOX_W}" height="{BOX_H}" rx="6"/>'
        f"{texts}</g>"
    )
