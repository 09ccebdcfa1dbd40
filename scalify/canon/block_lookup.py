"""Masked lookups into a device's block of a table: the vocab-parallel embedding and label
lookup, in one canonical form.

A device that holds rows [r*c, (r+1)*c) of a table looks up index i as: the local index
i - r*c, clipped or zeroed where it falls outside the block (so the lookup stays in range),
the lookup, and the result zeroed where i is not in the block. Frameworks spell the mask in
many ways (`0 <= i - start < c`, `start <= i < end`, Megatron's `i < start | i >= end` with the
branches swapped) and the index too (`clip`, `where`, JAX's own guards). This pass reads
integer code as affine forms over the values it cannot split further (here i and r) and finds
the ones that mean "i is in block r of size c", then rewrites the masked lookup as

    select(in_block[size=c](i, r), take(table, block_offset[size=c](i, r)), 0)

(with the mask broadcast over the table's other dims for `take`). The rewrite is exact:
inside the block the index equals i - r*c, which is what `block_offset` (i - r*c, clipped to
the block) gives; outside, both results are 0. It is made only when the table has exactly c
rows along the looked-up dim, so `block_offset[size=c]` indexes a table of c rows wherever it
appears. Anything else is left as it is. (`rules/tp.srl`'s `block_take` also checks the
table's size itself.)
"""

from __future__ import annotations

from scalify.externs.index_forms import Block, IndexReader
from scalify.ir import ROW_MAJOR_VIEWS, Graph, NewNodes, Node, replace_nodes
from scalify.values import literal_number


def fold_block_lookups(graph: Graph, ranges: dict[int, tuple[float, float]]) -> None:
    """Rewrite every masked lookup into a device's block into the canonical form, when the
    index is known to lie in the blocks (`ranges`: the integer ranges int_ranges.py found,
    an assumed input range among them). Outside them the masked lookup gives 0 where the
    whole table's lookup clamps, so the two are equal only for indices in range."""
    _block_indicators_as_selects(graph)
    reader = IndexReader(graph)

    def rewrite(node: Node, next_id: int) -> list[Node]:
        found = _masked_lookup(reader, node) if node.op == "select" else None
        if found is None or not _in_the_blocks(found[0], found[1], graph, ranges):
            return []
        return _rewrite(node, *found, graph, next_id)

    replace_nodes(graph, rewrite)


def _in_the_blocks(
    block: Block, lookup: Node, graph: Graph, ranges: dict[int, tuple[float, float]]
) -> bool:
    """Whether the index lies in [0, size * devices): its range and the coordinate's
    range are known, and the blocks of every coordinate cover the index's range."""
    lo, hi = ranges.get(block.index, (None, None))
    _, last = ranges.get(block.coord, (None, None))
    if lo is None or hi is None or last is None:
        return False
    return lo >= 0 and hi <= block.size * (last + 1) - 1


def _block_indicators_as_selects(graph: Graph) -> None:
    """`x * float(m)`, m "index in a device's block" (torchtitan's vocab-parallel embedding
    zeroes foreign rows so), as `select(m, x, 0)`: the same value over the reals, in the
    form the lookup fold reads."""
    reader = IndexReader(graph)
    nodes = graph.nodes
    found: dict[int, tuple[int, list[Node], int]] = {}  # mul -> (operand, views, predicate)
    for node in nodes.values():
        if node.op != "mul" or not node.dtype.startswith(("f", "bf")):
            continue
        for k in (0, 1):
            indicator = _indicator(nodes, node.operands[k])
            if indicator is not None and reader.block(indicator[1]) is not None:
                found[node.id] = (k, *indicator)
                break

    def rewrite(node: Node, next_id: int) -> list[Node]:
        if node.id not in found:
            return []
        k, views, mask = found[node.id]
        new = NewNodes(node, next_id)
        for view in reversed(views):  # the indicator's views, applied to the predicate
            mask = new.add(view.op, (mask,), view.shape, "pred", dict(view.attrs))
        zero = new.add("constant", (), (), node.dtype, {"value": "0"})
        zero = new.add("broadcast", (zero,), node.shape, node.dtype, {"dims": ()})
        new.add("select", (mask, node.operands[1 - k], zero), node.shape, node.dtype, {})
        new.nodes[-1].name = node.name
        return new.nodes

    replace_nodes(graph, rewrite)


_VIEWS = (*ROW_MAJOR_VIEWS, "broadcast", "transpose")


def _indicator(nodes: dict[int, Node], node_id: int) -> tuple[list[Node], int] | None:
    """(views top first, predicate) when the value is views of a predicate cast to a
    number (1 where it holds, 0 elsewhere), else None."""
    views: list[Node] = []
    node = nodes[node_id]
    while node.op in _VIEWS:
        views.append(node)
        node = nodes[node.operands[0]]
    if node.op != "convert" or nodes[node.operands[0]].dtype != "pred":
        return None
    return views, node.operands[0]


def _masked_lookup(reader: IndexReader, select: Node) -> tuple[Block, Node] | None:
    """(block, lookup) when `select` is a lookup kept only inside one block, else None."""
    mask, value, fill = select.operands
    block = reader.block(mask)
    if block is None:
        return None
    if block[1]:  # negated: the lookup sits in the false branch
        value, fill = fill, value
    if not _is_zero_fill(reader.nodes, fill):
        return None
    block = block[0]
    lookup_path = _value_path(reader, value, block)
    lookup = reader.nodes[lookup_path[-1]]
    if lookup.op not in ("take", "take_along"):
        return None
    table = reader.nodes[lookup.operands[0]]
    if table.shape[int(lookup.attrs["dim"])] != block.size:
        return None
    index_path = reader.down(lookup.operands[1], tuple(ROW_MAJOR_VIEWS))
    core = reader.nodes[index_path[-1]]
    atom = reader.nodes[block.index]
    if core.shape != atom.shape or not reader.equals_offset(core.id, block):
        return None
    index_atoms = dim_atoms(reader.nodes, index_path)
    extra = len(table.shape) - 1 if lookup.op == "take" else 0
    value_labels = index_atoms and dim_labels(reader.nodes, lookup_path, index_atoms + [()] * extra)
    mask_path = reader.mask_views(mask)
    if reader.nodes[mask_path[-1]].shape != atom.shape:
        return None
    mask_labels = dim_labels(reader.nodes, mask_path)
    if value_labels is None or mask_labels is None:
        return None
    aligned = all(
        v == m for v, m, n in zip(value_labels, mask_labels, select.shape, strict=True) if n != 1
    )
    return (block, lookup) if aligned else None


def _value_path(reader: IndexReader, node_id: int, block: Block) -> list[int]:
    """Down from the kept value to the lookup: through reshapes, and through the guards
    a framework puts around a lookup (a bounds check filling NaN) where the block
    decides them (inside it the index is in range)."""
    path = [node_id]
    while True:
        node = reader.nodes[path[-1]]
        if node.op in ROW_MAJOR_VIEWS:
            path.append(node.operands[0])
            continue
        if node.op == "select":
            decided = reader.decide(node.operands[0], block)
            if decided is not None:
                path.append(node.operands[1] if decided else node.operands[2])
                continue
        return path


# Per dim, the bottom node's dims it is made of, with their sizes, outer first (empty: a unit
# dim or one a broadcast made).
Atoms = tuple[tuple[int, int], ...]


def dim_labels(nodes: dict[int, Node], path: list[int], base: list | None = None) -> list | None:
    """For the top node of `path` (top first), which dim of the bottom node each dim shows:
    its number, a tuple of numbers for dims a reshape merged, None for a unit dim or one a
    broadcast made. `base`: the bottom node's `dim_atoms` (another path's top)."""
    atoms = dim_atoms(nodes, path, base)
    if atoms is None:
        return None
    return [None if not a else a[0][0] if len(a) == 1 else tuple(d for d, _ in a) for a in atoms]


def dim_atoms(nodes: dict[int, Node], path: list[int], base: list | None = None):
    """For the top node of `path`, each dim's bottom dims with their sizes (see `Atoms`);
    None when a reshape cuts a bottom dim (no dim correspondence)."""
    bottom = nodes[path[-1]]
    if base is None:
        base = [((d, n),) for d, n in enumerate(bottom.shape)]
    atoms = [a if n != 1 else () for a, n in zip(base, bottom.shape, strict=True)]
    for node_id in reversed(path[:-1]):
        node = nodes[node_id]
        if node.op == "broadcast":
            out: list = [()] * len(node.shape)
            for i, d in enumerate(node.attrs["dims"]):
                out[d] = atoms[i]
        elif node.op == "transpose":
            out = [atoms[p] for p in node.attrs["perm"]]
        elif node.op == "select":  # a guard the block decides: elementwise, same shape
            out = atoms
        else:  # a reshape: the bottom dims regrouped, none of them cut
            out = _regrouped([x for a in atoms for x in a], node.shape)
            if out is None:
                return None
        atoms = [a if n != 1 else () for a, n in zip(out, node.shape, strict=True)]
    return atoms


def _regrouped(flat: list[tuple[int, int]], shape: tuple[int, ...]) -> list | None:
    out, at = [], 0
    for n in shape:
        group, size = [], 1
        while size < n and at < len(flat):
            group.append(flat[at])
            size *= flat[at][1]
            at += 1
        if size != n:
            return None
        out.append(tuple(group))
    return out if at == len(flat) else None


def _rewrite(select: Node, block: Block, lookup: Node, graph: Graph, next_id: int) -> list[Node]:
    """The canonical masked lookup, in the select's place (last node: its value)."""
    nodes = graph.nodes
    index_shape = nodes[lookup.operands[1]].shape
    new = NewNodes(select, next_id)
    index, dtype = block.index, nodes[block.index].dtype
    viewed = [i for i in _reshaped_from(nodes, index) if nodes[i].shape == index_shape]
    if viewed:  # the index as it was before a unit dim came or went: no reshape back
        index = viewed[0]
    elif nodes[index].shape != index_shape:
        index = new.add("reshape", (index,), index_shape, dtype, {})
    attrs = {"size": block.size}
    offset = new.add("block_offset", (index, block.coord), index_shape, dtype, attrs)
    mine = new.add("in_block", (index, block.coord), index_shape, "pred", attrs)
    table = lookup.operands[0]
    taken = new.add(lookup.op, (table, offset), lookup.shape, lookup.dtype, lookup.attrs)
    new.nodes[-1].loc, new.nodes[-1].name = lookup.loc, f"{lookup.name}.block"
    if lookup.op == "take":
        dims = tuple(range(len(index_shape)))
        mine = new.add("broadcast", (mine,), lookup.shape, "pred", {"dims": dims})
    zero = new.add("constant", (), (), lookup.dtype, {"value": "0"})
    zero = new.add("broadcast", (zero,), lookup.shape, lookup.dtype, {"dims": ()})
    result = new.add("select", (mine, taken, zero), lookup.shape, lookup.dtype, {})
    if lookup.shape != select.shape:
        new.add("reshape", (result,), select.shape, select.dtype, {})
    return new.nodes


def _reshaped_from(nodes: dict[int, Node], node_id: int) -> list[int]:
    """The node and what it is a reshape of, down the chain (same values, same order)."""
    chain = [node_id]
    while nodes[chain[-1]].op in ROW_MAJOR_VIEWS:
        chain.append(nodes[chain[-1]].operands[0])
    return chain


def _is_zero_fill(nodes: dict[int, Node], node_id: int) -> bool:
    node = nodes[node_id]
    if node.op == "broadcast" and not nodes[node.operands[0]].shape:
        node = nodes[node.operands[0]]
    if node.op != "constant" or node.shape:
        return False
    return literal_number(node.attrs.get("value")) == 0.0
