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
appears, which `rules/tp.srl`'s `block_take` relies on. Anything else is left as it is.
"""

from __future__ import annotations

from dataclasses import dataclass

from .int_ranges import as_int, decide_compare, is_int_dtype
from .ir import Graph, Node

Affine = tuple[dict[int, int], int]  # coefficient per atom node, constant


@dataclass(frozen=True)
class Block:
    """`index - size * coord` lies in [0, size): `index` is in block `coord`."""

    index: int
    coord: int
    size: int


def fold_block_lookups(graph: Graph) -> None:
    """Rewrite every masked lookup into a device's block into the canonical form."""
    finder = _Finder(graph)

    def rewrite(node: Node, next_id: int) -> list[Node]:
        found = finder.masked_lookup(node) if node.op == "select" else None
        return [] if found is None else _rewrite(node, *found, graph, next_id)

    _replace_nodes(graph, rewrite)


def fold_one_hots(graph: Graph, ranges: dict[int, tuple[float, float]]) -> None:
    """`index == iota` along a new dim becomes `one_hot[dim, size](index)`. A one-hot of a
    device's local index `i - c*r` over its block of c entries (r in [0, n), from `ranges`)
    becomes the device's slice of the one-hot of i over all n*c entries:
    `slice_at(one_hot[n*c](i), c*r)`, which the layout rules read as a shard of the
    baseline's one-hot. Both rewrites are exact (wrap-around included: both sides compare i
    with the same n*c values)."""
    finder = _Finder(graph)

    def rewrite(node: Node, next_id: int) -> list[Node]:
        found = _one_hot_parts(node, graph) if node.op == "compare" else None
        if found is None:
            return []
        return _one_hot_nodes(node, *found, finder, ranges, graph, next_id)

    _replace_nodes(graph, rewrite)


def _replace_nodes(graph: Graph, rewrite) -> None:
    """Replace each node that `rewrite(node, next_id)` gives new nodes for (in graph order,
    operands first) by the last of them, keeping the graph's order topological."""
    nodes: dict[int, Node] = {}
    alias: dict[int, int] = {}
    next_id = max(graph.nodes, default=-1) + 1
    for node in graph.nodes.values():
        node.operands = tuple(alias.get(o, o) for o in node.operands)
        new = rewrite(node, next_id)
        if not new:
            nodes[node.id] = node
            continue
        next_id += len(new)
        nodes.update({n.id: n for n in new})
        alias[node.id] = new[-1].id
    graph.nodes = nodes
    graph.outputs = [alias.get(o, o) for o in graph.outputs]
    graph.equalities = [(alias.get(a, a), alias.get(b, b)) for a, b in graph.equalities]
    graph.output_shardings = {alias.get(k, k): v for k, v in graph.output_shardings.items()}


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
    finder: _Finder,
    ranges: dict,
    graph: Graph,
    next_id: int,
) -> list[Node]:
    new: list[Node] = []

    def emit(op: str, operands: tuple[int, ...], shape, dtype: str, attrs: dict) -> int:
        made = Node(next_id + len(new), op, operands, tuple(shape), dtype, attrs)
        made.loc, made.name, made.framework_op = node.loc, f"{node.name}.{op}", op
        new.append(made)
        return made.id

    block = _block_offset_form(index, finder, ranges, graph)
    if block is None:
        emit("one_hot", (index,), node.shape, "pred", {"dim": dim, "size": size})
        return new
    whole, coord, n = block
    if size != finder.block_size_of(index):
        emit("one_hot", (index,), node.shape, "pred", {"dim": dim, "size": size})
        return new
    shape = list(node.shape)
    shape[dim] = n * size
    full = emit("one_hot", (whole,), shape, "pred", {"dim": dim, "size": n * size})
    dtype = graph.nodes[coord].dtype
    step = emit("constant", (), (), dtype, {"value": str(size)})
    start = emit("mul", (coord, step), (), dtype, {})
    attrs = {"dim": dim, "size": size, "parts": n}
    emit("slice_at", (full, start), node.shape, "pred", attrs)
    return new


def _block_offset_form(index: int, finder: _Finder, ranges: dict, graph: Graph):
    """(i, r, n) when `index` is i - c*r with r a scalar in [0, n) (c: block_size_of)."""
    form = finder.affine(index)
    if form is None or form[1] != 0 or len(form[0]) != 2:
        return None
    nodes = graph.nodes
    arrays = [a for a in form[0] if nodes[a].shape]
    scalars = [a for a in form[0] if not nodes[a].shape]
    if len(arrays) != 1 or len(scalars) != 1 or form[0][arrays[0]] != 1:
        return None
    if nodes[arrays[0]].shape != nodes[index].shape or -form[0][scalars[0]] <= 0:
        return None
    lo, hi = ranges.get(scalars[0], (None, None))
    if lo != 0 or hi is None or hi == float("inf"):
        return None
    return arrays[0], scalars[0], int(hi) + 1


class _Finder:
    """Reads masks and indices of one graph (memoised affine forms)."""

    def __init__(self, graph: Graph) -> None:
        self.nodes = graph.nodes
        self.forms: dict[int, Affine | None] = {}

    def masked_lookup(self, select: Node) -> tuple[Block, Node] | None:
        """(block, lookup) when `select` is a lookup kept only inside one block, else None."""
        mask, value, fill = select.operands
        block = self.block(mask)
        if block is None:
            return None
        if block[1]:  # negated: the lookup sits in the false branch
            value, fill = fill, value
        if not _is_zero_fill(self.nodes, fill):
            return None
        block = block[0]
        lookup_path = self._value_path(value, block)
        lookup = self.nodes[lookup_path[-1]]
        if lookup.op not in ("take", "take_along"):
            return None
        table = self.nodes[lookup.operands[0]]
        if table.shape[int(lookup.attrs["dim"])] != block.size:
            return None
        index_path = self._down(lookup.operands[1], ("reshape",))
        core = self.nodes[index_path[-1]]
        atom = self.nodes[block.index]
        if core.shape != atom.shape or not self.equals_offset(core.id, block):
            return None
        index_labels = _labels(self.nodes, index_path)
        extra = len(table.shape) - 1 if lookup.op == "take" else 0
        value_labels = index_labels and _labels(
            self.nodes, lookup_path, index_labels + [None] * extra
        )
        mask_path = self._down(mask, ("reshape", "broadcast", "transpose"))
        if self.nodes[mask_path[-1]].shape != atom.shape:
            return None
        mask_labels = _labels(self.nodes, mask_path)
        if value_labels is None or mask_labels is None:
            return None
        aligned = all(
            v == m
            for v, m, n in zip(value_labels, mask_labels, select.shape, strict=True)
            if n != 1
        )
        return (block, lookup) if aligned else None

    def _value_path(self, node_id: int, block: Block) -> list[int]:
        """Down from the kept value to the lookup: through reshapes, and through the guards
        a framework puts around a lookup (a bounds check filling NaN) where the block
        decides them (inside it the index is in range)."""
        path = [node_id]
        while True:
            node = self.nodes[path[-1]]
            if node.op == "reshape":
                path.append(node.operands[0])
                continue
            if node.op == "select":
                decided = self.decide(node.operands[0], block)
                if decided is not None:
                    path.append(node.operands[1] if decided else node.operands[2])
                    continue
            return path

    def decide(self, node_id: int, block: Block) -> bool | None:
        """The predicate's value at every element whose index is inside the block, when the
        block decides it (the index there equals index - size * coord, in [0, size)), else
        None."""
        node = self.nodes[node_id]
        found = self._block_of(node_id)
        if found is not None and found[0] == block:
            return not found[1]
        ops = node.operands
        if self._keeps_positions(node):
            return self.decide(ops[0], block)
        if node.op == "not":
            inner = self.decide(ops[0], block)
            return None if inner is None else not inner
        if node.op in ("and", "or"):
            values = [self.decide(o, block) for o in ops]
            absorbing = node.op == "or"
            if absorbing in values:
                return absorbing
            return None if None in values else not absorbing
        if node.op == "compare":
            ranges = [self._range_in_block(o, block) for o in ops]
            return decide_compare(node.attrs.get("direction", ""), *ranges)
        if node.op == "constant" and not node.shape:
            return {"true": True, "false": False}.get(str(node.attrs.get("value")).lower())
        return None

    def _keeps_positions(self, node: Node) -> bool:
        """Whether every element of `node` tests the same index element as the element of
        its operand it comes from: a reshape (row-major order is kept), a broadcast that
        only appends dims (the index's dims lead, as in a lookup's result), a reduction of
        predicates over dims of size 1. A transpose, or a broadcast or reduction that moves
        or mixes positions, would test other elements' indices."""
        if node.op == "reshape":
            return True
        operand = self.nodes[node.operands[0]] if node.operands else None
        if node.op == "broadcast" and operand is not None:
            return tuple(node.attrs["dims"]) == tuple(range(len(operand.shape)))
        if node.op == "reduce" and node.attrs.get("op") in ("and", "or") and operand:
            return len(node.operands) == 1 and all(
                operand.shape[d] == 1 for d in node.attrs["dims"]
            )
        return False

    def _range_in_block(self, node_id: int, block: Block) -> tuple[int, int] | None:
        constant = self._constant(node_id)
        if constant is not None:
            return constant, constant
        if self.equals_offset(node_id, block):
            return 0, block.size - 1
        return None

    def _down(self, node_id: int, through: tuple[str, ...]) -> list[int]:
        """The node and what it views, down through `through` ops: top first."""
        path = [node_id]
        while self.nodes[path[-1]].op in through:
            path.append(self.nodes[path[-1]].operands[0])
        return path

    def block(self, node_id: int) -> tuple[Block, bool] | None:
        """(block, negated) when the predicate, under views, is "index in block coord" or
        its negation (callers check how the views line up)."""
        return self._block_of(self._down(node_id, ("reshape", "broadcast", "transpose"))[-1])

    def _block_of(self, node_id: int) -> tuple[Block, bool] | None:
        found = self.constraints(node_id)
        if found is None:
            return None
        bounds, negated = found
        if len(bounds) != 1:
            return None
        ((form, (lo, hi)),) = bounds.items()
        terms = dict(form)
        scalars = [a for a in terms if not self.nodes[a].shape]
        arrays = [a for a in terms if self.nodes[a].shape]
        if len(scalars) != 1 or len(arrays) != 1 or terms[arrays[0]] != 1:
            return None
        size = -terms[scalars[0]]
        if size <= 0 or (lo, hi) != (0, size - 1):
            return None
        return Block(arrays[0], scalars[0], size), negated

    def constraints(self, node_id: int) -> tuple[dict[frozenset, tuple[float, float]], bool] | None:
        """The predicate as bounds on affine forms (a conjunction), and whether it is negated."""
        node = self.nodes[node_id]
        if node.op == "not":
            inner = self.constraints(node.operands[0])
            return None if inner is None else (inner[0], not inner[1])
        if node.op == "compare":
            return self._compare(node)
        if node.op not in ("and", "or"):
            return None
        parts = [self.constraints(o) for o in node.operands]
        if any(p is None for p in parts):
            return None
        want_negated = node.op == "or"  # a | b == not(not a & not b)
        merged: dict[frozenset, tuple[float, float]] = {}
        for bounds, negated in parts:
            if negated != want_negated:
                bounds = _negated_half_line(bounds)
                if bounds is None:
                    return None
            for form, (lo, hi) in bounds.items():
                old = merged.get(form, (-float("inf"), float("inf")))
                merged[form] = (max(old[0], lo), min(old[1], hi))
        return merged, want_negated

    def _compare(self, node: Node) -> tuple[dict[frozenset, tuple[float, float]], bool] | None:
        a, b = (self.affine(o) for o in node.operands)
        if a is None or b is None:
            return None
        terms = {k: a[0].get(k, 0) - b[0].get(k, 0) for k in set(a[0]) | set(b[0])}
        terms = {k: v for k, v in terms.items() if v}
        const = a[1] - b[1]  # the test is on terms + const
        inf = float("inf")
        bounds = {
            "GE": (-const, inf),
            "GT": (1 - const, inf),
            "LE": (-inf, -const),
            "LT": (-inf, -1 - const),
        }.get(node.attrs.get("direction", ""))
        if bounds is None or not terms:
            return None
        arrays = [k for k in terms if self.nodes[k].shape]
        if arrays and terms[arrays[0]] < 0:  # keep the array's coefficient positive
            terms = {k: -v for k, v in terms.items()}
            bounds = (-bounds[1], -bounds[0])
        return {frozenset(terms.items()): bounds}, False

    def affine(self, node_id: int) -> Affine | None:
        if node_id not in self.forms:
            self.forms[node_id] = self._affine(self.nodes[node_id])
        return self.forms[node_id]

    def _affine(self, node: Node) -> Affine | None:
        if not is_int_dtype(node.dtype):
            return None
        if node.op == "constant" and not node.shape:
            value = as_int(node.attrs.get("value"))
            return None if value is None else ({}, value)
        ops = [self.affine(o) for o in node.operands]
        if node.op == "broadcast" and not self.nodes[node.operands[0]].shape:
            return ops[0]
        if node.op == "convert" and is_int_dtype(self.nodes[node.operands[0]].dtype):
            return ops[0]
        if node.op in ("add", "sub") and None not in ops:
            sign = 1 if node.op == "add" else -1
            (ta, ca), (tb, cb) = ops
            terms = {k: ta.get(k, 0) + sign * tb.get(k, 0) for k in set(ta) | set(tb)}
            return {k: v for k, v in terms.items() if v}, ca + sign * cb
        if node.op == "neg" and ops[0] is not None:
            return {k: -v for k, v in ops[0][0].items()}, -ops[0][1]
        if node.op == "mul" and None not in ops:
            (ta, ca), (tb, cb) = ops
            if not ta or not tb:
                (terms, const), factor = (ops[0], cb) if not tb else (ops[1], ca)
                return {k: v * factor for k, v in terms.items() if v * factor}, const * factor
        return {node.id: 1}, 0

    def equals_offset(self, node_id: int, block: Block) -> bool:
        """Whether the value equals index - size * coord wherever index is in the block."""
        node = self.nodes[node_id]
        form = self.affine(node_id)
        if form == ({block.index: 1, block.coord: -block.size}, 0):
            return True
        ops = node.operands
        if node.op == "convert" and is_int_dtype(self.nodes[ops[0]].dtype):
            return self.equals_offset(ops[0], block)
        if node.op == "reshape":  # a unit dim more or less: same values, same positions
            return self.equals_offset(ops[0], block)
        if node.op == "clamp":
            low, high = (self._constant(o) for o in (ops[0], ops[2]))
            return (
                low is not None
                and high is not None
                and low <= 0
                and high >= block.size - 1
                and self.equals_offset(ops[1], block)
            )
        if node.op in ("min", "max"):
            for bound, other in ((ops[0], ops[1]), (ops[1], ops[0])):
                value = self._constant(bound)
                keeps = value is not None and (
                    value >= block.size - 1 if node.op == "min" else value <= 0
                )
                if keeps and self.equals_offset(other, block):
                    return True
            return False
        if node.op == "select":
            decided = self.decide(ops[0], block)
            if decided is None:
                return False
            return self.equals_offset(ops[1] if decided else ops[2], block)
        return False

    def block_size_of(self, node_id: int) -> int | None:
        """c when the value is i - c*r (i an array, r a scalar), else None."""
        form = self.affine(node_id)
        if form is None or len(form[0]) != 2:
            return None
        scalars = [a for a in form[0] if not self.nodes[a].shape]
        return -form[0][scalars[0]] if len(scalars) == 1 else None

    def _constant(self, node_id: int) -> int | None:
        form = self.affine(node_id)
        return form[1] if form is not None and not form[0] else None


def _negated_half_line(
    bounds: dict[frozenset, tuple[float, float]],
) -> dict[frozenset, tuple[float, float]] | None:
    """not (lo <= f) is f <= lo - 1, and so on; a two-sided bound has no single negation."""
    if len(bounds) != 1:
        return None
    ((form, (lo, hi)),) = bounds.items()
    inf = float("inf")
    if hi == inf and lo != -inf:
        return {form: (-inf, lo - 1)}
    if lo == -inf and hi != inf:
        return {form: (hi + 1, inf)}
    return None


def _labels(nodes: dict[int, Node], path: list[int], base: list | None = None) -> list | None:
    """For the top node of `path` (top first), which dim of the bottom node each dim shows
    (None: a unit dim or one a broadcast made). `base`: the bottom node's labels."""
    bottom = nodes[path[-1]]
    labels = base if base is not None else list(range(len(bottom.shape)))
    labels = [lab if n != 1 else None for lab, n in zip(labels, bottom.shape, strict=True)]
    for node_id in reversed(path[:-1]):
        node = nodes[node_id]
        if node.op == "broadcast":
            out = [None] * len(node.shape)
            for i, d in enumerate(node.attrs["dims"]):
                out[d] = labels[i]
        elif node.op == "transpose":
            out = [labels[p] for p in node.attrs["perm"]]
        elif node.op == "select":  # a guard the block decides: elementwise, same shape
            out = labels
        else:  # a reshape: only unit dims may come or go
            source = nodes[node.operands[0]].shape
            kept = [lab for lab, n in zip(labels, source, strict=True) if n != 1]
            if len(kept) != sum(1 for n in node.shape if n != 1):
                return None  # it moves elements: no dim correspondence
            it = iter(kept)
            out = [next(it) if n != 1 else None for n in node.shape]
        labels = [lab if n != 1 else None for lab, n in zip(out, node.shape, strict=True)]
    return labels


def _rewrite(select: Node, block: Block, lookup: Node, graph: Graph, next_id: int) -> list[Node]:
    """The canonical masked lookup, in the select's place (last node: its value)."""
    nodes = graph.nodes
    index_shape = nodes[lookup.operands[1]].shape
    new: list[Node] = []

    def emit(op: str, operands: tuple[int, ...], shape, dtype: str, attrs: dict) -> int:
        node = Node(next_id + len(new), op, operands, tuple(shape), dtype, attrs)
        node.loc, node.name, node.framework_op = select.loc, f"{select.name}.{op}", op
        new.append(node)
        return node.id

    index, dtype = block.index, nodes[block.index].dtype
    if nodes[index].shape != index_shape:
        index = emit("reshape", (index,), index_shape, dtype, {})
    attrs = {"size": block.size}
    offset = emit("block_offset", (index, block.coord), index_shape, dtype, attrs)
    mine = emit("in_block", (index, block.coord), index_shape, "pred", attrs)
    taken = emit(lookup.op, (lookup.operands[0], offset), lookup.shape, lookup.dtype, lookup.attrs)
    new[-1].loc, new[-1].name = lookup.loc, f"{lookup.name}.block"
    if lookup.op == "take":
        dims = tuple(range(len(index_shape)))
        mine = emit("broadcast", (mine,), lookup.shape, "pred", {"dims": dims})
    zero = emit("constant", (), (), lookup.dtype, {"value": "0"})
    zero = emit("broadcast", (zero,), lookup.shape, lookup.dtype, {"dims": ()})
    result = emit("select", (mine, taken, zero), lookup.shape, lookup.dtype, {})
    if lookup.shape != select.shape:
        emit("reshape", (result,), select.shape, select.dtype, {})
    return new


def _is_zero_fill(nodes: dict[int, Node], node_id: int) -> bool:
    node = nodes[node_id]
    if node.op == "broadcast" and not nodes[node.operands[0]].shape:
        node = nodes[node.operands[0]]
    if node.op != "constant" or node.shape:
        return False
    try:
        return float(str(node.attrs.get("value"))) == 0.0
    except ValueError:
        return False
