"""One-hot encodings in canonical form, and a device's one-hot of its block.

`jax.nn.one_hot(i, n)` lowers to `broadcast(i) == iota` along a new dim: it becomes
`one_hot[dim, size](i)`. A device that one-hot encodes its local index `i - c*r` over its
block of c entries (the vocab-parallel one-hot embedding and target logit of TPU code)
computes its slice of the one-hot of i over all n*c entries: it becomes
`slice_at(one_hot[n*c](i), c*r)`, which `rules/tp.srl`'s `slice_at_coordinate` reads as a
shard of the baseline's one-hot. Both rewrites are exact.
"""

from __future__ import annotations

from scalify.canon.one_hot_sums import fold_one_hot_sums
from scalify.externs.index_forms import IndexReader, array_plus_block, device_block
from scalify.externs.int_ranges import is_int_dtype
from scalify.ir import ROW_MAJOR_VIEWS, Graph, NewNodes, Node, replace_nodes


def fold_one_hots(graph: Graph, ranges: dict[int, tuple[float, float]]) -> None:
    """`index == iota` along a new dim becomes `one_hot[dim, size](index)`. A one-hot of a
    device's local index `i - c*r` over its block of c entries (r in [0, n), from `ranges`)
    becomes the device's slice of the one-hot of i over all n*c entries:
    `slice_at(one_hot[n*c](i), c*r)`, which the layout rules read as a shard of the
    baseline's one-hot. Both rewrites are exact (wrap-around included: both sides compare i
    with the same n*c values)."""
    reader = IndexReader(graph)

    def rewrite(node: Node, next_id: int) -> list[Node]:
        found = _one_hot_parts(node, graph) if node.op == "compare" else None
        if found is None:
            return []
        return _one_hot_nodes(node, *found, reader, ranges, graph, next_id)

    replace_nodes(graph, rewrite)

    def one_hot_nodes(like: Node, index: int, dim: int, size: int, next_id: int) -> list[Node]:
        fresh = IndexReader(graph)  # the graph as the rewrite above left it
        return _one_hot_nodes(like, index, dim, size, fresh, ranges, graph, next_id)

    def block_one_hot(like, whole, coord, n, dim, size, next_id):
        return block_one_hot_nodes(like, whole, coord, n, dim, size, graph, next_id)

    fold_one_hot_sums(graph, ranges, one_hot_nodes, block_one_hot)


def _one_hot_parts(node: Node, graph: Graph) -> tuple[int, int, int] | None:
    """(index, new dim, size) of `broadcast(index) == iota` along one new dim."""
    if node.attrs.get("direction") != "EQ" or node.dtype != "pred":
        return None
    nodes = graph.nodes
    for spread, counted in (node.operands, node.operands[::-1]):
        wide, iota = nodes[spread], nodes[counted]
        if wide.op != "broadcast" or not is_int_dtype(wide.dtype):
            continue
        dims = tuple(wide.attrs["dims"])
        new = [d for d in range(len(wide.shape)) if d not in dims]
        if len(new) != 1 or list(dims) != sorted(dims):
            continue
        (dim,) = new
        if nodes[wide.operands[0]].shape != tuple(n for d, n in enumerate(wide.shape) if d != dim):
            continue
        if _iota_along(iota, dim, nodes) and iota.dtype == wide.dtype:
            return wide.operands[0], dim, wide.shape[dim]
    return None


def _iota_along(node: Node, dim: int, nodes: dict[int, Node]) -> bool:
    """Whether `node` counts 0, 1, ... along `dim` and is constant along every other dim:
    an iota along it, or a broadcast of an iota whose other dims have size 1."""
    if node.op == "iota":
        return int(node.attrs.get("dim", 0)) == dim
    if node.op != "broadcast":
        return False
    source = nodes[node.operands[0]]
    dims = tuple(node.attrs["dims"])
    if dim not in dims:
        return False
    if source.op == "reshape":  # a 1-D iota with unit dims added
        inner = nodes[source.operands[0]]
        if inner.op != "iota" or len(inner.shape) != 1:
            return False
        return [k for k, n in enumerate(source.shape) if n != 1] == [dims.index(dim)]
    k = dims.index(dim)
    others = [n for i, n in enumerate(source.shape) if i != k]
    return (
        source.op == "iota" and int(source.attrs.get("dim", 0)) == k and all(n == 1 for n in others)
    )


def _one_hot_nodes(
    node: Node,
    index: int,
    dim: int,
    size: int,
    reader: IndexReader,
    ranges: dict,
    graph: Graph,
    next_id: int,
) -> list[Node]:
    inner = reader.down(index, tuple(ROW_MAJOR_VIEWS))[-1]  # a view of i - c*r reads as it
    block = _block_offset_form(inner, reader, ranges, graph)
    if block is None or size != reader.block_size_of(inner):
        new = NewNodes(node, next_id)
        new.add("one_hot", (index,), node.shape, "pred", {"dim": dim, "size": size})
        return new.nodes
    if inner == index:
        return block_one_hot_nodes(node, *block, dim, size, graph, next_id)
    # the local index is a view of i - c*r: the same view of i, in the same positions
    whole, coord, n = block
    new = NewNodes(node, next_id)
    index_node = graph.nodes[index]
    viewed = new.add("reshape", (whole,), index_node.shape, index_node.dtype, {})
    after = new.next_id + len(new.nodes)
    return new.nodes + block_one_hot_nodes(node, viewed, coord, n, dim, size, graph, after)


def block_one_hot_nodes(
    node: Node, whole: int, coord: int, n: int, dim: int, size: int, graph: Graph, next_id: int
) -> list[Node]:
    """The one-hot over block `coord` (of n blocks of `size`) of `whole`, as the device's
    slice of the whole one-hot: `slice_at(one_hot[n*size](whole), size*coord)`."""
    new = NewNodes(node, next_id)
    shape = list(node.shape)
    shape[dim] = n * size
    full = new.add("one_hot", (whole,), shape, "pred", {"dim": dim, "size": n * size})
    device_block(new, full, coord, n, size, dim, node.shape, "pred", graph)
    return new.nodes


def _block_offset_form(index: int, reader: IndexReader, ranges: dict, graph: Graph):
    """(i, r, n) when `index` is i - c*r with r a scalar in [0, n) (c: block_size_of)."""
    found = array_plus_block(reader, ranges, index)
    if found is None or found[2] >= 0:
        return None
    whole, coord, _, n = found
    return whole, coord, n
