"""Integer index code read as affine forms, and "index in a device's block" among it.

A device that holds block r (of c entries) of a table indexes it with `i - c*r`, tests
`0 <= i - c*r < c` in one of many spellings, and guards the lookup with tests that the block
decides. `IndexReader` reads such code: the affine form of an integer value over the values
it cannot split further (here i and r), a predicate as bounds on affine forms (and its
negation), the block it states, and whether a value equals `i - c*r` wherever i is in the
block. block_lookup.py and one_hot.py rewrite what it finds into canonical forms.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scalify.externs.int_ranges import (
    Range,
    as_int,
    converts_exactly,
    decide_compare,
    is_int_dtype,
    node_ranges,
)
from scalify.ir import ROW_MAJOR_VIEWS, Graph, NewNodes, Node

Affine = tuple[dict[int, int], int]  # coefficient per atom node, constant


@dataclass(frozen=True)
class Block:
    """`index - size * coord` lies in [0, size): `index` is in block `coord`."""

    index: int
    coord: int
    size: int


class IndexReader:
    """Reads one graph's integer code: affine forms over the values it cannot split, the
    predicates "index in block coord" among them, and what holds inside such a block."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.forms: dict[int, Affine | None] = {}
        self._joints: dict[int, frozenset] | None = None
        self._ranges: dict[int, Range] | None = None

    def _exact_convert(self, node: Node) -> bool:
        """An integer convert that keeps its operand's value: a narrowing one only where
        the operand's range fits (s32 2147483647 converted to s8 is -1, not itself)."""
        if node.op != "convert":
            return False
        if self._ranges is None:
            self._ranges = node_ranges(self.graph)
        return converts_exactly(self.nodes[node.operands[0]], node.dtype, self._ranges)

    @property
    def nodes(self) -> dict[int, Node]:
        """The graph's nodes as they are now: while `replace_nodes` runs, they include the
        nodes made so far, which later operands may name."""
        return self.graph.nodes

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
        if node.op in ROW_MAJOR_VIEWS:
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

    def down(self, node_id: int, through: tuple[str, ...]) -> list[int]:
        """The node and what it views, down through `through` ops: top first."""
        path = [node_id]
        while self.nodes[path[-1]].op in through:
            path.append(self.nodes[path[-1]].operands[0])
        return path

    def mask_views(self, node_id: int) -> list[int]:
        """Down from a predicate through what only views it: reshapes, broadcasts,
        transposes, and an and/or over dims of size 1 (XLA drops a unit dim so): top first."""
        path = [node_id]
        while True:
            node = self.nodes[path[-1]]
            if (
                node.op in ROW_MAJOR_VIEWS
                or node.op in ("broadcast", "transpose")
                or (node.op == "reduce" and self._keeps_positions(node))
            ):
                path.append(node.operands[0])
                continue
            return path

    def block(self, node_id: int) -> tuple[Block, bool] | None:
        """(block, negated) when the predicate, under views, is "index in block coord" or
        its negation (callers check how the views line up)."""
        return self._block_of(self.mask_views(node_id)[-1])

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
        if not scalars or len(arrays) != 1 or terms[arrays[0]] != 1:
            return None
        found = self._coordinate({a: -terms[a] for a in scalars})
        if found is None:
            return None
        coord, size = found
        if size <= 0 or (lo, hi) != (0, size - 1):
            return None
        return Block(arrays[0], coord, size), negated

    def _coordinate(self, terms: dict[int, int]) -> tuple[int, int] | None:
        """(r, c) when the scalar terms are c * r: one atom r, or a node r whose form is
        the terms over their common factor c (a device's coordinate on several axes,
        `(c_fsdp * 2 + c_sp)`, which device_tables.py writes as one node)."""
        if len(terms) == 1:
            ((atom, size),) = terms.items()
            return atom, size
        size = math.gcd(*terms.values())
        if size <= 0:
            return None
        wanted = frozenset((a, k // size) for a, k in terms.items())
        return next(
            ((node, size) for node, form in self._joint_forms().items() if form == wanted), None
        )

    def _joint_forms(self) -> dict[int, frozenset]:
        """The scalar integer nodes that are a sum of two or more atoms with no constant."""
        if self._joints is None:
            self._joints = {}
            for node_id, node in list(self.nodes.items()):
                if node.shape or node.op not in ("add", "convert") or not is_int_dtype(node.dtype):
                    continue
                form = self.affine(node_id)
                if form is not None and form[1] == 0 and len(form[0]) > 1:
                    self._joints[node_id] = frozenset(form[0].items())
        return self._joints

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
        if (node.op == "broadcast" or node.op in ROW_MAJOR_VIEWS) and _one_element(
            self.nodes[node.operands[0]]
        ):
            return ops[0]  # every element is the operand's one value
        if self._exact_convert(node):
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
        coord = self.affine(block.coord)
        if coord is not None and coord[1] == 0:
            offset = {a: -block.size * k for a, k in coord[0].items()}
            if form == ({block.index: 1, **offset}, 0):
                return True
        ops = node.operands
        if self._exact_convert(node):
            return self.equals_offset(ops[0], block)
        if node.op in ROW_MAJOR_VIEWS:  # a unit dim more or less: same values, same positions
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


def _one_element(node: Node) -> bool:
    return all(n == 1 for n in node.shape)


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


def guarded_index_range(select: Node, nodes: dict[int, Node]) -> tuple[int, tuple[int, int]] | None:
    """(the branch, [0, size)) for `select(index outside block r, other, index - size*r)`
    (either way round): a vocab-parallel lookup's guard, whose local branch is taken only
    where the index is in the device's block, so it lies in [0, size) wherever it is taken.
    The test must test the select's own positions (no view between)."""
    if select.op != "select" or not is_int_dtype(select.dtype):
        return None
    reader = IndexReader(_Nodes(nodes))
    test = select.operands[0]
    if reader.mask_views(test) != [test] or nodes[test].shape != select.shape:
        return None
    found = reader.block(test)
    if found is None:
        return None
    block, negated = found
    inside = select.operands[2] if negated else select.operands[1]
    if not reader.equals_offset(inside, block):
        return None
    return inside, (0, block.size - 1)


@dataclass
class _Nodes:
    """A graph as far as an IndexReader looks: its nodes."""

    nodes: dict[int, Node]


def array_plus_block(
    reader: IndexReader, ranges: dict[int, tuple[float, float]], node_id: int
) -> tuple[int, int, int, int] | None:
    """(a, r, c, n) when the value is `a + c * r`: a an array of the value's shape (once),
    r a scalar in [0, n) by the integer ranges, c a nonzero constant. A device's local index
    `i - c*r` into its block of c entries, or its count `iota(k) + k*r` of its block of a
    sequence, has this form."""
    form = reader.affine(node_id)
    if form is None or form[1] != 0 or len(form[0]) != 2:
        return None
    nodes = reader.nodes
    arrays = [a for a in form[0] if nodes[a].shape]
    scalars = [a for a in form[0] if not nodes[a].shape]
    if len(arrays) != 1 or len(scalars) != 1 or form[0][arrays[0]] != 1:
        return None
    if nodes[arrays[0]].shape != nodes[node_id].shape:
        return None
    lo, hi = ranges.get(scalars[0], (None, None))
    if lo != 0 or hi is None or hi == float("inf"):
        return None
    return arrays[0], scalars[0], form[0][scalars[0]], int(hi) + 1


def device_block(
    new: NewNodes, whole: int, coord: int, n: int, size: int, dim: int, shape, dtype: str,
    graph: Graph,
) -> int:  # fmt: skip
    """`slice_at(whole, size * coord)` along dim: block `coord` of the n blocks of `size` that
    make `whole`, which `rules/tp.srl`'s `slice_at_coordinate` reads as a shard. A bare
    device id (a job of n devices on one axis) becomes `(id / 1) % n`, the coordinate the
    rules read; the ranges have it in [0, n), where the two are equal."""
    coord_type = graph.nodes[coord].dtype
    if graph.nodes[coord].op == "rank_index":
        one = new.add("constant", (), (), coord_type, {"value": "1"})
        count = new.add("constant", (), (), coord_type, {"value": str(n)})
        quotient = new.add("div", (coord, one), (), coord_type, {})
        coord = new.add("rem", (quotient, count), (), coord_type, {})
    step = new.add("constant", (), (), coord_type, {"value": str(size)})
    start = new.add("mul", (coord, step), (), coord_type, {})
    attrs = {"dim": dim, "size": size, "parts": n}
    return new.add("slice_at", (whole, start), shape, dtype, attrs)
