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

Positions split over two axes at once (sp and tp, in either order) count from
`k * (n_2 r_1 + r_2)`: blocks of k in a mixed-radix number over the coordinates. That is
block r_2 of block r_1 of the whole count, one `slice_at` per coordinate, the most
significant first: a shard over each axis in turn.
"""

from __future__ import annotations

import math

from scalify.externs.index_forms import IndexReader, device_block
from scalify.ir import ROW_MAJOR_VIEWS, Graph, NewNodes, Node, replace_nodes


def fold_block_iotas(graph: Graph, ranges: dict[int, tuple[float, float]]) -> None:
    reader = IndexReader(graph)

    def rewrite(node: Node, next_id: int) -> list[Node]:
        if node.op != "add":
            return []
        found = _iota_plus_offsets(reader, ranges, node)
        if found is None:
            return []
        count, terms = found
        dim = int(graph.nodes[count].attrs.get("dim", 0))
        k = node.shape[dim]
        if graph.nodes[count].op != "iota" or not _mixed_radix(terms, k):
            return []
        total = k * math.prod(n for _, _, n in terms)
        if node.dtype in EXACT_INTEGERS and total > EXACT_INTEGERS[node.dtype]:
            return []
        new = NewNodes(node, next_id)
        shape = list(node.shape)
        shape[dim] = total
        block = new.add("iota", (), tuple(shape), node.dtype, {"dim": dim})
        for coord, _, n in sorted(terms, key=lambda t: -t[1]):  # most significant first
            shape[dim] //= n
            block = device_block(new, block, coord, n, shape[dim], dim, tuple(shape),
                                 node.dtype, graph)  # fmt: skip
        return new.nodes

    replace_nodes(graph, rewrite)


def _mixed_radix(terms: list[tuple[int, int, int]], k: int) -> bool:
    """Whether the offsets `step * coord` count blocks of k in one mixed-radix number: the
    smallest step k, each next one the last times the last coordinate's count."""
    weight = k
    for _, step, n in sorted(terms, key=lambda t: t[1]):
        if step != weight or n < 2:
            return False
        weight *= n
    return bool(terms)


def _iota_plus_offsets(
    reader: IndexReader, ranges: dict[int, tuple[float, float]], node: Node
) -> tuple[int, list[tuple[int, int, int]]] | None:
    """(count, [(r, c, n), ...]) when `node` is `count + sum(c * r)`, each r a scalar in
    [0, n) by the integer ranges: in integers (the reader's affine form: one array, once,
    plus scalars), or in floats as one add of a float iota and an integer offset
    converted."""
    if node.dtype in EXACT_INTEGERS:
        pair = _float_count(reader, node)
        if pair is not None:
            count, offset = pair
            terms = _coordinate_terms(reader.affine(offset), ranges, reader)
            return None if terms is None else (count, terms)
    form = reader.affine(node.id)
    if form is None or form[1] != 0:
        return None
    arrays = [a for a in form[0] if reader.nodes[a].shape]
    if len(arrays) != 1 or form[0][arrays[0]] != 1:
        return None
    if reader.nodes[arrays[0]].shape != node.shape:
        return None
    scalars = ({a: c for a, c in form[0].items() if a != arrays[0]}, 0)
    terms = _coordinate_terms(scalars, ranges, reader)
    return None if terms is None else (arrays[0], terms)


def _coordinate_terms(form, ranges, reader: IndexReader) -> list[tuple[int, int, int]] | None:
    """The (r, c, n) of an affine form `sum(c * r)` with no constant, each r a scalar in
    [0, n) by the integer ranges; None for any other form."""
    if form is None or form[1] != 0 or not form[0]:
        return None
    terms = []
    for coord, step in form[0].items():
        lo, hi = ranges.get(coord, (None, None))
        if reader.nodes[coord].shape or lo != 0 or hi is None or hi == float("inf"):
            return None
        terms.append((coord, step, int(hi) + 1))
    return terms


# the largest count each float type holds exactly, with every integer below it
EXACT_INTEGERS = {"f64": 2**53, "f32": 2**24, "f16": 2**11, "bf16": 2**8}


def _float_count(reader: IndexReader, node: Node) -> tuple[int, int] | None:
    """(count, offset) when the float `node` is `iota + float(offset)`: one float add of a
    float iota and an integer scalar converted (whose integer form the reader reads)."""
    nodes = reader.nodes
    for count, other in (node.operands, node.operands[::-1]):
        offset = nodes[other]
        while offset.op == "broadcast" or offset.op in ROW_MAJOR_VIEWS:
            if offset.shape and math.prod(nodes[offset.operands[0]].shape) != 1:
                break
            offset = nodes[offset.operands[0]]
        if nodes[count].op == "iota" and offset.op == "convert" and not offset.shape:
            return count, offset.operands[0]
    return None
