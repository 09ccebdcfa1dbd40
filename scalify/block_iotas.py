"""A device's block of positions: `iota(k) + k * r` with r its coordinate in [0, n).

Sequence or context parallelism gives each device positions `r * k .. r * k + k - 1` of a
sequence of n * k (a causal mask's query positions, RoPE's angles): the device counts its
own k and adds its offset. That is its slice of the count over the whole sequence,
`slice_at(iota(n * k), k * r)`, which `rules/tp.srl`'s `slice_at_coordinate` reads as a
shard of the baseline's count. The rewrite is exact for r in [0, n), which the integer
ranges say.

A count in floats (RoPE's frequencies, `jnp.arange(k, dtype=float32)` on each device's
block) is the float iota plus the converted integer offset: exact while n * k is an integer
the float type holds exactly (2^24 for f32), and the same rewrite.
"""

from __future__ import annotations

import math

from .index_forms import IndexReader, array_plus_block, device_block
from .ir import ROW_MAJOR_VIEWS, Graph, NewNodes, Node, replace_nodes


def fold_block_iotas(graph: Graph, ranges: dict[int, tuple[float, float]]) -> None:
    reader = IndexReader(graph)

    def rewrite(node: Node, next_id: int) -> list[Node]:
        found = None
        if node.op == "add":
            found = array_plus_block(reader, ranges, node.id) or _float_count(reader, ranges, node)
        if found is None:
            return []
        count, coord, step, n = found
        dim = int(graph.nodes[count].attrs.get("dim", 0))
        k = node.shape[dim]
        if graph.nodes[count].op != "iota" or step != k or n < 2:
            return []
        if node.dtype in EXACT_INTEGERS and n * k > EXACT_INTEGERS[node.dtype]:
            return []
        new = NewNodes(node, next_id)
        whole = list(node.shape)
        whole[dim] = n * k
        full = new.add("iota", (), tuple(whole), node.dtype, {"dim": dim})
        device_block(new, full, coord, n, k, dim, node.shape, node.dtype, graph)
        return new.nodes

    replace_nodes(graph, rewrite)


# the largest count each float type holds exactly, with every integer below it
EXACT_INTEGERS = {"f64": 2**53, "f32": 2**24, "f16": 2**11, "bf16": 2**8}


def _float_count(
    reader: IndexReader, ranges: dict[int, tuple[float, float]], node: Node
) -> tuple[int, int, int, int] | None:
    """(count, r, c, n) when the float `node` is `iota + float(c * r)`: one float add of a
    float iota and an integer offset converted (whose integer form the reader reads), r in
    [0, n) by the integer ranges."""
    if node.dtype not in EXACT_INTEGERS:
        return None
    nodes = reader.nodes
    for count, other in (node.operands, node.operands[::-1]):
        offset = nodes[other]
        while offset.op == "broadcast" or offset.op in ROW_MAJOR_VIEWS:
            if offset.shape and math.prod(nodes[offset.operands[0]].shape) != 1:
                break
            offset = nodes[offset.operands[0]]
        if nodes[count].op != "iota" or offset.op != "convert" or offset.shape:
            continue
        form = reader.affine(offset.operands[0])
        if form is None or form[1] != 0 or len(form[0]) != 1:
            continue
        ((coord, step),) = form[0].items()
        lo, hi = ranges.get(coord, (None, None))
        if lo == 0 and hi is not None and hi != float("inf") and not nodes[coord].shape:
            return count, coord, step, int(hi) + 1
    return None
