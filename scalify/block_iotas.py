"""A device's block of positions: `iota(k) + k * r` with r its coordinate in [0, n).

Sequence or context parallelism gives each device positions `r * k .. r * k + k - 1` of a
sequence of n * k (a causal mask's query positions, RoPE's angles): the device counts its
own k and adds its offset. That is its slice of the count over the whole sequence,
`slice_at(iota(n * k), k * r)`, which `rules/tp.srl`'s `slice_at_coordinate` reads as a
shard of the baseline's count. The rewrite is exact for r in [0, n), which the integer
ranges say.
"""

from __future__ import annotations

from .index_forms import IndexReader, array_plus_block, device_block
from .ir import Graph, NewNodes, Node, replace_nodes


def fold_block_iotas(graph: Graph, ranges: dict[int, tuple[float, float]]) -> None:
    reader = IndexReader(graph)

    def rewrite(node: Node, next_id: int) -> list[Node]:
        found = array_plus_block(reader, ranges, node.id) if node.op == "add" else None
        if found is None:
            return []
        count, coord, step, n = found
        dim = int(graph.nodes[count].attrs.get("dim", 0))
        k = node.shape[dim]
        if graph.nodes[count].op != "iota" or step != k or n < 2:
            return []
        new = NewNodes(node, next_id)
        whole = list(node.shape)
        whole[dim] = n * k
        full = new.add("iota", (), tuple(whole), node.dtype, {"dim": dim})
        device_block(new, full, coord, n, k, dim, node.shape, node.dtype, graph)
        return new.nodes

    replace_nodes(graph, rewrite)
