"""A device's block of positions: `iota(k) + k * r` with r its coordinate in [0, n).

Sequence or context parallelism gives each device positions `r * k .. r * k + k - 1` of a
sequence of n * k (a causal mask's query positions, RoPE's angles): the device counts its
own k and adds its offset. That is its slice of the count over the whole sequence,
`slice_at(iota(n * k), k * r)`, which `rules/tp.srl`'s `slice_at_coordinate` reads as a
shard of the baseline's count. The rewrite is exact for r in [0, n), which the integer
ranges say.
"""

from __future__ import annotations

from .index_forms import IndexReader
from .ir import Graph, NewNodes, Node, replace_nodes


def fold_block_iotas(graph: Graph, ranges: dict[int, tuple[float, float]]) -> None:
    reader = IndexReader(graph)

    def rewrite(node: Node, next_id: int) -> list[Node]:
        found = _block_count(node, reader, ranges, graph) if node.op == "add" else None
        if found is None:
            return []
        iota, coord, n = found
        dim = iota.attrs.get("dim", 0)
        k = node.shape[dim]
        new = NewNodes(node, next_id)
        whole = list(node.shape)
        whole[dim] = n * k
        full = new.add("iota", (), tuple(whole), node.dtype, {"dim": dim})
        dtype = graph.nodes[coord].dtype
        if graph.nodes[coord].op == "rank_index":  # the device id itself: (id / 1) % n
            one = new.add("constant", (), (), dtype, {"value": "1"})
            count = new.add("constant", (), (), dtype, {"value": str(n)})
            coord = new.add(
                "rem", (new.add("div", (coord, one), (), dtype, {}), count), (), dtype, {}
            )
        step = new.add("constant", (), (), dtype, {"value": str(k)})
        start = new.add("mul", (coord, step), (), dtype, {})
        new.add(
            "slice_at", (full, start), node.shape, node.dtype, {"dim": dim, "size": k, "parts": n}
        )
        return new.nodes

    replace_nodes(graph, rewrite)


def _block_count(node: Node, reader: IndexReader, ranges: dict, graph: Graph):
    """(the iota, the coordinate r, n) when `node` is `iota(k) + k * r` along the iota's
    dim, r a scalar in [0, n)."""
    form = reader.affine(node.id)
    if form is None or form[1] != 0 or len(form[0]) != 2:
        return None
    nodes = graph.nodes
    counts = [a for a in form[0] if nodes[a].op == "iota" and nodes[a].shape == node.shape]
    scalars = [a for a in form[0] if not nodes[a].shape]
    if len(counts) != 1 or len(scalars) != 1 or form[0][counts[0]] != 1:
        return None
    count, coord = nodes[counts[0]], scalars[0]
    if form[0][coord] != node.shape[count.attrs.get("dim", 0)]:
        return None
    lo, hi = ranges.get(coord, (None, None))
    if lo != 0 or hi is None or hi == float("inf") or hi < 1:
        return None
    return count, coord, int(hi) + 1
