"""Gradients of slices, put back together: a sum of zero-padded pieces that tile a dim is
their concatenation.

Autograd (JAX's transpose rules and PyTorch's `slice_backward` alike) gives each slice of a
tensor its gradient padded with zeros to the whole tensor, and adds the pieces up with the
tensor's other gradients: the two halves `rotate_half` takes in RoPE, the chunks of a fused
projection. Where the pieces tile the dim, their sum is the concatenation of the pieces, a
form the layout rules follow through a shard of another dim; a padding's width is part of
its key, so a padded shard is never related to the baseline's wider padding. The rewrite is
exact: every element is one piece's value plus zeros.
"""

from __future__ import annotations

from scalify.ir import Graph, Node, fill_value, replace_nodes
from scalify.ops.structural import one_dim_pad

Piece = tuple[int, int, int, int]  # (dim, start, width, node id of the unpadded piece)


def join_padded_pieces(graph: Graph) -> None:
    """Rewrite each sum holding zero-padded pieces that tile a dim (see the module doc)."""
    users = graph.users()

    def inner(node_id: int) -> bool:
        node = graph.nodes[node_id]
        return node.op == "add" and len(users[node_id]) == 1

    def rewrite(node: Node, next_id: int) -> list[Node]:
        if node.op != "add" or any(graph.nodes[u].op == "add" for u in users[node.id]):
            return []
        terms = _summands(graph, node, inner)
        pieces = {t: _piece(graph, graph.nodes[t]) for t in terms}
        groups: dict[int, list[tuple[Piece, int]]] = {}
        for term, piece in pieces.items():
            if piece is not None:
                groups.setdefault(piece[0], []).append((piece, term))
        for dim, members in groups.items():
            members.sort(key=lambda m: m[0][1])
            if not _tiles(members, node.shape[dim]):
                continue
            joined = {term for _, term in members}
            rest = [t for t in terms if t not in joined]
            return _concatenation(node, dim, [p[3] for p, _ in members], rest, graph, next_id)
        return []

    replace_nodes(graph, rewrite)


def _summands(graph: Graph, node: Node, inner) -> list[int]:
    terms: list[int] = []
    for operand in node.operands:
        if inner(operand):
            terms.extend(_summands(graph, graph.nodes[operand], inner))
        else:
            terms.append(operand)
    return terms


def _piece(graph: Graph, node: Node) -> Piece | None:
    """(dim, start, width, piece) of `pad(piece, 0)` padding one dim, without interior."""
    if node.op != "pad" or len(node.operands) != 2:
        return None
    value = fill_value(graph.nodes[node.operands[1]], graph.nodes)
    if value is None or float(value) != 0.0:
        return None
    found = one_dim_pad(node)
    if found is None:
        return None
    dim, low, high = found
    return dim, low, node.shape[dim] - low - high, node.operands[0]


def _tiles(members: list[tuple[Piece, int]], size: int) -> bool:
    """Whether the pieces, in order of their starts, cover [0, size) once."""
    at = 0
    for piece, _ in members:
        if piece[1] != at:
            return False
        at += piece[2]
    return len(members) > 1 and at == size


def _concatenation(
    node: Node, dim: int, pieces: list[int], rest: list[int], graph: Graph, next_id: int
) -> list[Node]:
    """concat(pieces) (at most 3 operands a node, nested) plus the other terms; the last
    node computes what `node` did."""
    made: list[Node] = []

    def new(op: str, operands: tuple[int, ...], shape, attrs, name: str) -> int:
        made.append(
            Node(
                next_id + len(made),
                op,
                operands,
                shape,
                node.dtype,
                attrs,
                node.loc,
                name,
                node.framework_op,
            )
        )
        return made[-1].id

    acc = pieces[0]
    queue = pieces[1:]
    while queue:
        take, queue = queue[:2], queue[2:]
        parts = (acc, *take)
        width = sum(
            graph.nodes[p].shape[dim] if p in graph.nodes else _made(made, p).shape[dim]
            for p in parts
        )
        shape = node.shape[:dim] + (width,) + node.shape[dim + 1 :]
        acc = new("concatenate", parts, shape, {"dim": dim}, f"{node.name}.joined")
    for term in rest:
        acc = new("add", (acc, term), node.shape, {}, f"{node.name}.sum")
    made[-1].name = node.name
    return made


def _made(made: list[Node], node_id: int) -> Node:
    return next(n for n in made if n.id == node_id)
