"""Numeric fuzzing of rules: random small instances, the rule alone in the e-graph, and the
simulator as judge.

For each rule, an instance is one op (chosen from what the rule matches) over inputs with
random layouts on a random 1-D or 2-D mesh. The e-graph gets the layout analysis and only
that rule; every relation it then proves between a distributed node and a baseline node is
checked by running both graphs with numpy. A relation that does not hold numerically is an
unsound rule, reported with its name, source, seed and the instance.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .compiler.compile import CompiledRuleSet
from .compiler.emit import emit_families, emit_rules
from .compiler.lower import rule_name
from .compiler.signatures import OP_ARITY
from .engine.encode import shape_free_nodes
from .ir import ELEMENTWISE_BINARY, ELEMENTWISE_UNARY, Graph, Node
from .layout import Layout, Placement, canonical, layout_str, local_shape
from .mesh import Mesh
from .relations import Relation
from .simulate.kernels import NotSimulable, apply, host
from .simulate.spmd import compare_output, distribute, random_input, run_baseline, run_spmd

UNARY = sorted(ELEMENTWISE_UNARY - {"convert"})
BINARY = sorted(ELEMENTWISE_BINARY)
LOGICAL = {"and", "or", "xor", "not"}
COLLECTIVE_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
MESHES = (
    (("tp", 2),),
    (("tp", 3),),
    (("tp", 4),),
    (("dp", 2), ("tp", 2)),
    (("dp", 2), ("tp", 3)),
)


@dataclass
class Instance:
    """A baseline and a distributed graph with the same node ids, and input relations."""

    mesh: Mesh
    base: Graph
    dist: Graph
    inputs: list[Relation]
    text: str


@dataclass
class RuleReport:
    name: str
    source: str
    instances: int = 0
    fired: int = 0
    unsound: list[str] = field(default_factory=list)


class _Builder:
    """Builds both graphs node by node; the distributed side gets local shapes."""

    def __init__(self, rng: np.random.Generator, mesh: Mesh) -> None:
        self.rng = rng
        self.mesh = mesh
        self.base: dict[int, Node] = {}
        self.dist: dict[int, Node] = {}
        self.inputs: list[Relation] = []
        self.lines: list[str] = []
        unit = math.prod(n for _, n in mesh.axes)  # any dim may be split over every axis
        self.unit = unit
        self.hints: list[str | None] = []
        self.next_id = 0
        self.axis = mesh.names[int(rng.integers(len(mesh.names)))]
        self.shared_dim = int(rng.integers(3))

    def hint(self, k: int) -> str | None:
        return self.hints[k] if k < len(self.hints) and self.rng.random() < 0.85 else None

    def operand_layout(self, k: int, rank: int, fallback: Layout) -> Layout:
        """Bias operand k toward the layout the rule under test asks for."""
        kind = self.hint(k)
        if kind == "shard" and rank:
            dim = (
                self.shared_dim % rank if self.rng.random() < 0.7 else int(self.rng.integers(rank))
            )
            return (Placement("shard", self.axis, dim=dim),)
        if kind in ("partial:sum", "partial:max", "partial:?"):
            op = kind.split(":")[1]
            op = op if op != "?" else ("sum" if self.rng.random() < 0.7 else "max")
            return (Placement("partial", self.axis, op=op),)
        if kind in ("inv", "base"):
            return ()
        return fallback

    def size(self) -> int:
        return self.unit * int(self.rng.integers(1, 3))

    def mesh_stride(self, axis: str) -> int:
        """How far apart in device ids consecutive coordinates of `axis` are."""
        stride = 1
        for name, size in reversed(self.mesh.axes):
            if name == axis:
                break
            stride *= size
        return stride

    def maybe_wrong(self, value: int) -> int:
        """`value` most of the time, a random other one otherwise (device-index arithmetic
        with a wrong stride, count or block size)."""
        return value if self.rng.random() < 0.75 else int(self.rng.integers(1, 2 * value + 2))

    def layout(self, rank: int, allow_partial: bool = True, sharded: bool = False) -> Layout:
        if rank and len(self.mesh.axes) > 1 and self.rng.random() < 0.15:
            # one dim split over every axis, in either order: the order picks the blocks
            dim = int(self.rng.integers(rank))
            axes = [a for a, _ in self.mesh.axes]
            order = self.rng.permutation(len(axes))
            return tuple(Placement("shard", axes[i], dim=dim) for i in order)
        placements = []
        free = list(range(rank))
        for axis, _ in self.mesh.axes:
            choice = self.rng.random() * (0.45 if sharded and rank else 1.0)
            if choice < 0.45 and free:
                dim = free.pop(int(self.rng.integers(len(free))))
                placements.append(Placement("shard", axis, dim=dim))
            elif choice < 0.65 and allow_partial:
                op = "sum" if self.rng.random() < 0.8 else "max"
                placements.append(Placement("partial", axis, op=op))
        order = self.rng.permutation(len(placements))
        return tuple(placements[i] for i in order)

    def _add(
        self,
        op: str,
        operands: tuple[int, ...],
        base_shape,
        dist_shape,
        dtype: str,
        attrs: dict,
        dist_attrs: dict | None = None,
    ) -> int:
        node_id = self.next_id
        self.next_id += 1
        name = f"n{node_id}"
        self.base[node_id] = Node(
            node_id, op, operands, tuple(base_shape), dtype, dict(attrs), name=name
        )
        self.dist[node_id] = Node(
            node_id,
            op,
            operands,
            tuple(dist_shape),
            dtype,
            dict(attrs if dist_attrs is None else dist_attrs),
            name=name,
        )
        return node_id

    def dist_only(
        self, op: str, operands: tuple[int, ...], shape: tuple[int, ...], dtype: str, attrs: dict
    ) -> int:
        """A node only the distributed program has (device-index arithmetic)."""
        node_id = self.next_id
        self.next_id += 1
        self.dist[node_id] = Node(
            node_id, op, operands, shape, dtype, dict(attrs), name=f"n{node_id}"
        )
        self.lines.append(f"n{node_id} = {op}{attrs or ''}({', '.join(f'n{o}' for o in operands)})")
        return node_id

    def input(self, shape: tuple[int, ...], dtype: str, layout: Layout | None = None) -> int:
        layout = self.layout(len(shape)) if layout is None else layout
        node_id = self._add(
            "parameter",
            (),
            shape,
            local_shape(shape, layout, self.mesh),
            dtype,
            {"name": f"x{len(self.inputs)}", "index": len(self.inputs)},
        )
        self.inputs.append(Relation(node_id, node_id, f"x{len(self.inputs)}", layout, "fuzz"))
        self.lines.append(f"n{node_id}: {dtype}{list(shape)} ~ {layout_str(layout)}")
        return node_id

    def op(
        self,
        op: str,
        operands: tuple[int, ...],
        dtype: str,
        attrs: dict,
        per_side: Callable[[dict[int, Node]], tuple[dict, tuple | None]] | None = None,
    ) -> int:
        """Add `op` to both graphs. `per_side(nodes)` gives attributes and the output shape
        for ops whose attributes depend on a side's sizes (broadcast, merge, split, slice)."""
        made = []
        for side in (self.base, self.dist):
            side_attrs, shape = dict(attrs), None
            if per_side:
                extra, shape = per_side(side)
                side_attrs.update(extra)
            probe = Node(-1, op, operands, tuple(shape or ()), dtype, side_attrs)
            if op in COLLECTIVE_OPS:
                shape = _collective_shape(probe, side[operands[0]].shape, self.mesh)
            else:
                args = [host(np.zeros(side[o].shape), side[o].dtype) for o in operands]
                try:
                    shape = apply(probe, args, [side[o].dtype for o in operands]).shape
                except (ValueError, IndexError, TypeError) as err:
                    raise NotSimulable(f"ill-typed instance: {err}") from None
            _check_types(op, side_attrs, [side[o].shape for o in operands])
            made.append(({k: v for k, v in side_attrs.items() if not k.startswith("_")}, shape))
        (base_attrs, base_shape), (dist_attrs, dist_shape) = made
        node_id = self._add(op, operands, base_shape, dist_shape, dtype, base_attrs, dist_attrs)
        if op in COLLECTIVE_OPS:  # the baseline has no collective: it is the operand itself
            del self.base[node_id]
            self.base_output = operands[0]
        shown = base_attrs if base_attrs == dist_attrs else f"{base_attrs} / local {dist_attrs}"
        args = ", ".join(f"n{o}" for o in operands)
        self.lines.append(f"n{node_id} = {op}{shown or ''}({args})")
        return node_id

    def fill(self, shape: tuple[int, ...], dist_shape: tuple[int, ...], dtype: str) -> int:
        value = f"{self.rng.integers(1, 4)}"
        c = self._add("constant", (), (), (), dtype, {"value": value})
        return self._add("broadcast", (c,), shape, dist_shape, dtype, {"dims": ()})

    def graphs(self, output: int) -> tuple[Graph, Graph]:
        ids = [r.dist_id for r in self.inputs]
        base_output = getattr(self, "base_output", output)
        return (
            Graph("fuzz-baseline", self.base, ids, [base_output]),
            Graph("fuzz-distributed", self.dist, ids, [output]),
        )


def _check_types(op: str, attrs: dict, shapes: list[tuple[int, ...]]) -> None:
    """Reject draws HLO would reject; numpy broadcasting would silently accept them."""
    if op == "dot":
        pairs = list(zip(attrs["lhs_batch"], attrs["rhs_batch"], strict=True)) + list(
            zip(attrs["lhs_contracting"], attrs["rhs_contracting"], strict=True)
        )
        if any(shapes[0][l_dim] != shapes[1][r_dim] for l_dim, r_dim in pairs):
            raise NotSimulable("ill-typed dot")
    elif op in ELEMENTWISE_UNARY | ELEMENTWISE_BINARY | {"select", "clamp"}:
        if len({s for s in shapes if s}) > 1:
            raise NotSimulable("ill-typed elementwise op")
    elif op in ("gather", "scatter"):
        batch = ("operand_batching_dims", "start_indices_batching_dims")
        if op == "scatter":
            batch = ("input_batching_dims", "scatter_indices_batching_dims")
        pairs = zip(attrs[batch[0]], attrs[batch[1]], strict=True)
        if any(shapes[0][d] != shapes[1][e] for d, e in pairs):
            raise NotSimulable(f"ill-typed {op}: batching dims of different sizes")
        if op == "scatter":  # each update's position is an index vector's position
            vector = attrs["index_vector_dim"]
            counts = [n for e, n in enumerate(shapes[1]) if e != vector]
            window = attrs["update_window_dims"]
            if [n for d, n in enumerate(shapes[2]) if d not in window] != counts:
                raise NotSimulable("ill-typed scatter: indices and updates of different counts")


def _collective_shape(node: Node, shape, mesh: Mesh):
    shape = list(shape)
    size = 1
    for axis in str(node.attrs.get("_axes", "")).split(","):
        if axis:
            size *= mesh.axis_size(axis)
    if node.op == "all_gather":
        shape[node.attrs["dim"]] *= size
    elif node.op == "reduce_scatter":
        shape[node.attrs["dim"]] //= size
    elif node.op == "all_to_all":
        if shape[node.attrs["split_dim"]] % size:
            raise NotSimulable("all_to_all split dim not divisible by the group")
        shape[node.attrs["split_dim"]] //= size
        shape[node.attrs["concat_dim"]] *= size
    return tuple(shape)


def _elementwise(b: _Builder, op: str, arity: int) -> int:
    rank = int(b.rng.integers(1, 4))
    shape = tuple(b.size() for _ in range(rank))
    dtype = "s32" if op in ("div", "add", "mul", "sub") and b.rng.random() < 0.2 else "f32"
    dtype = "pred" if op in LOGICAL else dtype
    layout = b.layout(rank, allow_partial=b.rng.random() < 0.5, sharded=b.rng.random() < 0.5)
    operands = []
    hints = [b.hint(k) for k in range(arity)]
    hinted = [b.operand_layout(k, rank, layout) for k in range(arity)]
    if any(h == "shard" for h in hints):
        layout = next(lay for lay, h in zip(hinted, hints, strict=True) if h == "shard")
    for k in range(arity):
        roll = b.rng.random()
        mine = layout if hints[k] in ("splat", "broadcast", None) else hinted[k]
        if op == "select" and k == 0:
            operands.append(b.input(shape, "pred", layout if roll < 0.7 else None))
        elif hints[k] == "splat" or (roll < 0.15 and arity > 1 and k > 0):
            operands.append(b.fill(shape, local_shape(shape, layout, b.mesh), dtype))
        elif rank > 1 and (hints[k] == "broadcast" or (roll < 0.3 and arity > 1)):
            operands.append(_broadcast_operand(b, shape, layout, dtype))
        else:
            operands.append(b.input(shape, dtype, mine if roll < 0.85 else None))
    attrs = {}
    if op == "compare":
        attrs["direction"] = ("EQ", "NE", "LT", "LE", "GT", "GE")[int(b.rng.integers(6))]
    return b.op(op, tuple(operands), "pred" if op == "compare" else dtype, attrs)


def _broadcast_operand(b: _Builder, shape, out_layout: Layout, dtype: str) -> int:
    keep = sorted(b.rng.choice(len(shape), size=len(shape) - 1, replace=False).tolist())
    small_layout = (
        tuple(
            Placement(p.kind, p.axis, dim=keep.index(p.dim) if p.kind == "shard" else -1, op=p.op)
            for p in out_layout
            if p.kind == "partial" or p.dim in keep
        )
        if b.rng.random() < 0.7
        else b.layout(len(keep))
    )
    x = b.input(tuple(shape[d] for d in keep), dtype, small_layout)
    dist_shape = local_shape(shape, out_layout, b.mesh)
    return b.op(
        "broadcast",
        (x,),
        dtype,
        {"dims": tuple(keep)},
        lambda side: ({}, shape if side is b.base else dist_shape),
    )


def _dot(b: _Builder) -> int:
    batch = int(b.rng.integers(0, 2))
    free_l, free_r, contract = 1, int(b.rng.integers(0, 2)) + 1, int(b.rng.integers(1, 3))
    sizes = {k: b.size() for k in range(batch + free_l + free_r + contract)}
    lhs_dims = (
        list(range(batch))
        + [batch + i for i in range(free_l)]
        + [batch + free_l + free_r + i for i in range(contract)]
    )
    rhs_dims = (
        list(range(batch))
        + [batch + free_l + free_r + i for i in range(contract)]
        + [batch + free_l + i for i in range(free_r)]
    )
    b.rng.shuffle(lhs_dims)
    b.rng.shuffle(rhs_dims)
    lhs_layout = b.operand_layout(
        0, len(lhs_dims), () if b.rng.random() < 0.3 else b.layout(len(lhs_dims))
    )
    rhs_layout = b.operand_layout(
        1, len(rhs_dims), () if b.rng.random() < 0.3 else b.layout(len(rhs_dims))
    )
    lhs = b.input(tuple(sizes[d] for d in lhs_dims), "f32", lhs_layout)
    rhs = b.input(tuple(sizes[d] for d in rhs_dims), "f32", rhs_layout)
    contracted = [batch + free_l + free_r + i for i in range(contract)]
    attrs = {
        "lhs_batch": tuple(lhs_dims.index(d) for d in range(batch)),
        "rhs_batch": tuple(rhs_dims.index(d) for d in range(batch)),
        "lhs_contracting": tuple(lhs_dims.index(d) for d in contracted),
        "rhs_contracting": tuple(rhs_dims.index(d) for d in contracted),
    }
    return b.op("dot", (lhs, rhs), "f32", attrs)


def _reduce(b: _Builder) -> int:
    rank = int(b.rng.integers(1, 4))
    x = b.input(
        tuple(b.size() for _ in range(rank)), "f32", b.operand_layout(0, rank, b.layout(rank))
    )
    dims = tuple(
        sorted(b.rng.choice(rank, size=int(b.rng.integers(1, rank + 1)), replace=False).tolist())
    )
    op = "sum" if b.rng.random() < 0.6 else "max"
    return b.op("reduce", (x,), "f32", {"dims": dims, "op": op})


def _broadcast(b: _Builder) -> int:
    rank = int(b.rng.integers(1, 3))
    x_shape = tuple(b.size() for _ in range(rank))
    x_layout = b.operand_layout(0, rank, b.layout(rank))
    x = b.input(x_shape, "f32", x_layout)
    out_rank = rank + int(b.rng.integers(1, 3))
    dims = tuple(sorted(b.rng.choice(out_rank, size=rank, replace=False).tolist()))
    out = [b.size() for _ in range(out_rank)]
    for i, d in enumerate(dims):
        out[d] = x_shape[i]
    local = list(out)
    for i, d in enumerate(dims):
        local[d] = b.dist[x].shape[i]
    return b.op(
        "broadcast",
        (x,),
        "f32",
        {"dims": dims},
        lambda side: ({}, tuple(out) if side is b.base else tuple(local)),
    )


def _merge(b: _Builder) -> int:
    if b.hint(0) == "op:split":
        b.hints = []
        x = _split(b)
        p = (
            b.base[x].attrs["dim"]
            if b.rng.random() < 0.8
            else int(b.rng.integers(len(b.base[x].shape) - 1))
        )
        return _merge_of(b, x, p)
    rank = int(b.rng.integers(2, 4))
    x = b.input(
        tuple(b.size() for _ in range(rank)), "f32", b.operand_layout(0, rank, b.layout(rank))
    )
    return _merge_of(b, x, int(b.rng.integers(rank - 1)))


def _merge_of(b: _Builder, x: int, p: int) -> int:
    def per_side(side):
        shape = side[x].shape
        merged = shape[:p] + (shape[p] * shape[p + 1],) + shape[p + 2 :]
        return {"dim": p, "inner": shape[p + 1]}, merged

    return b.op("merge", (x,), "f32", {}, per_side)


def _split(b: _Builder) -> int:
    if b.hint(0) == "op:merge":
        b.hints = []
        x = _merge(b)
        p = b.base[x].attrs["dim"]
        merged_inner = b.base[x].attrs["inner"]
        divisors = [q for q in range(1, b.base[x].shape[p] + 1) if b.base[x].shape[p] % q == 0]
        q = merged_inner if b.rng.random() < 0.8 else divisors[int(b.rng.integers(len(divisors)))]
        return _split_of(b, x, p, q)
    rank = int(b.rng.integers(1, 3))
    shape = [b.size() for _ in range(rank)]
    p = int(b.rng.integers(rank))
    shape[p] *= b.unit
    x = b.input(tuple(shape), "f32", b.operand_layout(0, rank, b.layout(rank)))
    divisors = [q for q in range(1, shape[p] + 1) if shape[p] % q == 0]
    return _split_of(b, x, p, divisors[int(b.rng.integers(len(divisors)))])


def _split_of(b: _Builder, x: int, p: int, q: int) -> int:
    keep_inner = b.rng.random() < 0.8

    def per_side(side):
        size = side[x].shape[p]
        local_q = (
            q
            if size % q == 0 and keep_inner
            else max(d for d in range(1, size + 1) if size % d == 0 and d <= q)
        )
        out = side[x].shape[:p] + (size // local_q, local_q) + side[x].shape[p + 1 :]
        return {"dim": p, "inner": local_q}, out

    return b.op("split", (x,), "f32", {}, per_side)


def _slice(b: _Builder) -> int:
    rank = int(b.rng.integers(1, 4))
    x = b.input(
        tuple(b.size() for _ in range(rank)), "f32", b.operand_layout(0, rank, b.layout(rank))
    )
    d = int(b.rng.integers(rank))
    start = int(b.rng.integers(b.base[x].shape[d] // 2 + 1))

    def per_side(side):
        shape = side[x].shape
        starts = [0] * rank
        starts[d] = min(start, shape[d] - 1)
        return {"starts": tuple(starts), "limits": tuple(shape), "strides": (1,) * rank}, None

    return b.op("slice", (x,), "f32", {}, per_side)


def _concatenate(b: _Builder) -> int:
    rank = int(b.rng.integers(1, 4))
    shape = tuple(b.size() for _ in range(rank))
    layout = b.operand_layout(0, rank, b.layout(rank))
    x = b.input(shape, "f32", layout)
    y = b.input(shape, "f32", b.operand_layout(1, rank, layout))
    return b.op("concatenate", (x, y), "f32", {"dim": int(b.rng.integers(rank))})


def _slice_at_coordinate(b: _Builder) -> int:
    """A slice of x at offset k * ((partition id / s) % n), with s, n and k right for a random
    axis most of the time and wrong otherwise; x is replicated over the axis, or not."""
    names = b.mesh.names
    axis = names[int(b.rng.integers(len(names)))]
    n = b.mesh.axis_size(axis)
    stride = b.mesh_stride(axis)
    maybe_wrong = b.maybe_wrong

    rank = int(b.rng.integers(1, 3))
    shape = [b.size() for _ in range(rank)]
    d = int(b.rng.integers(rank))
    unit_slices = b.rng.random() < 0.3  # one entry per device: the offset is the coordinate
    shape[d] = n * (
        int(b.rng.integers(1, 3)) if unit_slices else b.unit * int(b.rng.integers(1, 3))
    )
    layout = () if b.rng.random() < 0.7 else b.layout(rank)
    x = b.input(tuple(shape), "f32", layout)
    local = b.dist[x].shape[d]
    k = max(1, local // n)
    if 0 in b.dist[x].shape or local % k:
        raise NotSimulable("slice size does not divide the dim")
    pid = b.dist_only("rank_index", (), (), "u32", {"kind": "partition"})
    s = b.dist_only("constant", (), (), "u32", {"value": str(maybe_wrong(stride))})
    q = b.dist_only("div", (pid, s), (), "u32", {})
    m = b.dist_only("constant", (), (), "u32", {"value": str(maybe_wrong(n))})
    r = b.dist_only("rem", (q, m), (), "u32", {})
    c = b.dist_only("convert", (r,), (), "s32", {})
    if unit_slices and k == 1:
        offset = c
    else:
        step = b.dist_only("constant", (), (), "s32", {"value": str(maybe_wrong(k))})
        offset = b.dist_only("mul", (c, step), (), "s32", {})
    size = list(b.dist[x].shape)
    size[d] = k
    out = b.dist_only(
        "slice_at",
        (x, offset),
        tuple(size),
        "f32",
        {"dim": d, "size": k, "parts": b.dist[x].shape[d] // k},
    )
    b.base_output = x  # the baseline is x itself; the slice relates to it by a layout
    return out


def _block_lookup(b: _Builder, along: bool) -> int:
    """A device's masked lookup into its block of a table: select(in_block(i, r), take(t,
    block_offset(i, r)), 0), summed over the axis it should be a partial sum over. The
    coordinate's stride and count, the block size and the table's layout are right most of
    the time and wrong otherwise."""
    axis = b.axis
    n = b.mesh.axis_size(axis)
    stride = b.mesh_stride(axis)
    maybe_wrong = b.maybe_wrong

    c = int(b.rng.integers(1, 4))
    d = int(b.rng.integers(2))
    table_shape = [b.size(), b.size()]
    table_shape[d] = n * c
    right = (Placement("shard", axis, dim=d),)
    t = b.input(tuple(table_shape), "f32", right if b.rng.random() < 0.75 else b.layout(2))
    if along:  # one entry per row: the index has the table's other dim and k entries along d
        index_shape = list(table_shape)
        index_shape[d] = int(b.rng.integers(1, 3))
    else:
        index_shape = [int(b.rng.integers(1, 4)) for _ in range(int(b.rng.integers(1, 3)))]
    index_layout = b.layout(len(index_shape), allow_partial=False)
    i = b.input(tuple(index_shape), "s32", () if b.rng.random() < 0.85 else index_layout)
    for side in (b.base, b.dist):
        side[i].attrs["assumed_range"] = (0, table_shape[d] - 1)
    pid = b.dist_only("rank_index", (), (), "u32", {"kind": "partition"})
    s = b.dist_only("constant", (), (), "u32", {"value": str(maybe_wrong(stride))})
    q = b.dist_only("div", (pid, s), (), "u32", {})
    m = b.dist_only("constant", (), (), "u32", {"value": str(maybe_wrong(n))})
    r = b.dist_only("rem", (q, m), (), "u32", {})
    coord = b.dist_only("convert", (r,), (), "s32", {})
    block = {"size": maybe_wrong(c)}
    local_index = b.dist[i].shape
    offset = b.dist_only("block_offset", (i, coord), local_index, "s32", block)
    mine = b.dist_only("in_block", (i, coord), local_index, "pred", block)
    op = "take_along" if along else "take"
    probe = Node(-1, op, (t, i), (), "f32", {"dim": d})
    args = [np.zeros(b.dist[t].shape), np.zeros(local_index, dtype=np.int64)]
    try:
        local_out = apply(probe, args, ["f32", "s32"]).shape
    except (ValueError, IndexError) as err:
        raise NotSimulable(f"ill-typed instance: {err}") from None
    taken = b.dist_only(op, (t, offset), local_out, "f32", {"dim": d})
    if not along:
        dims = tuple(range(len(local_index)))
        mine = b.dist_only("broadcast", (mine,), local_out, "pred", {"dims": dims})
    zero = b.dist_only("constant", (), (), "f32", {"value": "0"})
    zeros = b.dist_only("broadcast", (zero,), local_out, "f32", {"dims": ()})
    out = b.dist_only("select", (mine, taken, zeros), local_out, "f32", {})
    base_args = [np.zeros(table_shape), np.zeros(index_shape, dtype=np.int64)]
    base_out = apply(probe, base_args, ["f32", "s32"]).shape
    lookup = b.next_id
    b.next_id += 1
    b.base[lookup] = Node(lookup, op, (t, i), base_out, "f32", {"dim": d}, name=f"n{lookup}")
    b.lines.append(f"baseline n{lookup} = {op}[dim={d}](n{t}, n{i})")
    b.base_output = lookup
    return out


def _lookup(b: _Builder, along: bool) -> int:
    """A lookup in a randomly laid out table at randomly laid out indices (kept in range):
    whole rows (`take`) or one entry per row (`take_along`)."""
    d = int(b.rng.integers(2))
    table_shape = [b.size(), b.size()]
    t = b.input(tuple(table_shape), "f32", b.operand_layout(0, 2, b.layout(2)))
    if along:
        index_shape = list(table_shape)
        index_shape[d] = int(b.rng.integers(1, 3))
    else:
        index_shape = [b.size() for _ in range(int(b.rng.integers(1, 3)))]
    rank = len(index_shape)
    i = b.input(
        tuple(index_shape), "s32", b.operand_layout(1, rank, b.layout(rank, allow_partial=False))
    )
    for side in (b.base, b.dist):
        side[i].attrs["assumed_range"] = (0, table_shape[d] - 1)
    return b.op("take_along" if along else "take", (t, i), "f32", {"dim": d})


def _batched_indexing(b: _Builder, scatter: bool) -> int:
    """A gather or scatter vmapped over a batch dim (dim 0 of every operand), as JAX emits
    it: operand (batch, entries, width), indices (batch, count, 1) kept in range (a scatter's
    one past the end too: its window is dropped), updates (batch, count, width). Every
    operand is laid out at random, so a batch shard meets other shards and replicas."""
    batch, entries, count, width = b.size(), b.size(), b.size(), int(b.rng.integers(1, 4))
    if scatter and b.hint(0) == "splat":
        layout = b.operand_layout(1, 3, b.layout(3, allow_partial=False))
        dist = local_shape((batch, entries, width), (), b.mesh)
        dist = (local_shape((batch, count, 1), layout, b.mesh)[0], *dist[1:])
        operand = b.fill((batch, entries, width), dist, "f32")
        hints = (layout, None)
    else:
        operand = b.input((batch, entries, width), "f32", b.operand_layout(0, 3, b.layout(3)))
        hints = (None, None)
    index_layout = hints[0]
    if index_layout is None:
        index_layout = b.operand_layout(1, 3, b.layout(3, allow_partial=False))
    index = b.input((batch, count, 1), "s32", index_layout)
    for side in (b.base, b.dist):
        side[index].attrs["assumed_range"] = (0, entries if scatter else entries - 1)
    if not scatter:
        attrs = {
            "offset_dims": (2,),
            "collapsed_slice_dims": (1,),
            "start_index_map": (1,),
            "operand_batching_dims": (0,),
            "start_indices_batching_dims": (0,),
            "index_vector_dim": 2,
        }
        return b.op(
            "gather",
            (operand, index),
            "f32",
            attrs,
            lambda side: ({"slice_sizes": (1, 1, side[operand].shape[2])}, None),
        )
    updates = b.input((batch, count, width), "f32", b.operand_layout(2, 3, b.layout(3)))
    attrs = {
        "update_window_dims": (2,),
        "inserted_window_dims": (1,),
        "scatter_dims_to_operand_dims": (1,),
        "input_batching_dims": (0,),
        "scatter_indices_batching_dims": (0,),
        "index_vector_dim": 2,
        "op": "sum" if b.rng.random() < 0.8 else "max",
    }
    return b.op("scatter", (operand, index, updates), "f32", attrs)


def _one_hot(b: _Builder) -> int:
    """A one-hot of a randomly laid out integer tensor (partial sums included: the rule must
    not take them) along a random new dim."""
    rank = int(b.rng.integers(1, 3))
    i = b.input(
        tuple(b.size() for _ in range(rank)), "s32", b.operand_layout(0, rank, b.layout(rank))
    )
    dim = int(b.rng.integers(rank + 1))
    return b.op("one_hot", (i,), "pred", {"dim": dim, "size": int(b.rng.integers(2, 6))})


def _transpose(b: _Builder) -> int:
    rank = int(b.rng.integers(2, 4))
    x = b.input(
        tuple(b.size() for _ in range(rank)), "f32", b.operand_layout(0, rank, b.layout(rank))
    )
    return b.op("transpose", (x,), "f32", {"perm": tuple(b.rng.permutation(rank).tolist())})


def _convert(b: _Builder) -> int:
    x = b.input((b.size(), b.size()), "f32", b.operand_layout(0, 2, b.layout(2)))
    return b.op("convert", (x,), ("f64", "bf16", "f16", "s32")[int(b.rng.integers(4))], {})


def _top_k(b: _Builder) -> int:
    """The k largest entries of the last dim (values or indices) of a randomly laid out x."""
    rank = int(b.rng.integers(1, 4))
    x = b.input(
        tuple(b.size() for _ in range(rank)), "f32", b.operand_layout(0, rank, b.layout(rank))
    )
    part = int(b.rng.integers(2))
    k = int(b.rng.integers(1, b.dist[x].shape[-1] + 1))
    return b.op("top_k", (x,), "s32" if part else "f32", {"k": k, "part": part, "largest": True})


def _cumsum(b: _Builder) -> int:
    """A prefix sum along a random dim of a randomly laid out x."""
    rank = int(b.rng.integers(1, 4))
    x = b.input(
        tuple(b.size() for _ in range(rank)), "f32", b.operand_layout(0, rank, b.layout(rank))
    )
    return b.op("cumsum", (x,), "f32", {"dim": int(b.rng.integers(rank))})


def _collective(b: _Builder, op: str) -> int:
    rank = int(b.rng.integers(2 if op == "all_to_all" else 1, 4 if op == "all_to_all" else 3))
    shape = [b.size() for _ in range(rank)]
    if op == "all_to_all":  # every dim stays divisible by any group after any sharding
        shape = [n * b.unit for n in shape]
    x = b.input(tuple(shape), "f32", b.operand_layout(0, rank, b.layout(rank)))
    names = b.mesh.names
    roll = b.rng.random()
    if roll < 0.35:
        axes = (b.axis,)
    elif roll < 0.7:
        axes = (names[int(b.rng.integers(len(names)))],)
    elif roll < 0.85:
        axes = names
    else:
        axes = ()
    groups = b.mesh.groups(axes) if axes else _odd_groups(b.mesh, b.rng)
    attrs: dict = {"groups": groups, "_axes": ",".join(axes)}
    if op not in ("all_gather", "all_to_all"):
        roll = b.rng.random()
        attrs["op"] = "sum" if roll < 0.7 else "max" if roll < 0.85 else "min"
    if op == "all_to_all":
        attrs["split_dim"] = int(b.rng.integers(rank))
        attrs["concat_dim"] = int(b.rng.integers(rank))
    elif op != "all_reduce":
        attrs["dim"] = int(b.rng.integers(rank))
        if op == "reduce_scatter" and b.dist[x].shape[attrs["dim"]] % max(
            1, math.prod(b.mesh.axis_size(a) for a in axes)
        ):
            attrs["dim"] = 0
    if not axes:
        attrs["_axes"] = ""
    return b.op(op, (x,), "f32", attrs)


def _odd_groups(mesh: Mesh, rng) -> tuple[tuple[int, ...], ...]:
    """Groups of no axis: every device, in a shuffled order (order matters for gathers)."""
    devices = rng.permutation(mesh.size).tolist()
    return (tuple(devices),)


def generate(op: str, rng: np.random.Generator, hints: list[str | None] | None = None) -> Instance:
    """A random instance of `op`; `hints` bias operand layouts toward a rule's pattern."""
    mesh = Mesh(MESHES[int(rng.integers(len(MESHES)))])
    b = _Builder(rng, mesh)
    b.hints = list(hints or [])
    if (
        op == "slice_at"
        or (op == "rem" and b.hints[:1] == ["op:div"])
        or (op == "convert" and b.hints[:1] == ["coord"])
    ):
        out = _slice_at_coordinate(b)
    elif op == "select" and b.hints[1:2] in (["op:take"], ["op:take_along"]):
        out = _block_lookup(b, along=b.hints[1] == "op:take_along")
    elif op in UNARY:
        out = _elementwise(b, op, 1)
    elif op in BINARY:
        out = _elementwise(b, op, 2)
    elif op in ("select", "clamp"):
        out = _elementwise(b, op, 3)
    elif op == "dot":
        out = _dot(b)
    elif op == "reduce":
        out = _reduce(b)
    elif op == "broadcast":
        out = _broadcast(b)
    elif op == "transpose":
        out = _transpose(b)
    elif op in ("merge", "split", "slice", "concatenate"):
        out = {"merge": _merge, "split": _split, "slice": _slice, "concatenate": _concatenate}[op](
            b
        )
    elif op == "convert":
        out = _convert(b)
    elif op == "top_k":
        out = _top_k(b)
    elif op == "one_hot":
        out = _one_hot(b)
    elif op in ("take", "take_along"):
        out = _lookup(b, along=op == "take_along")
    elif op == "cumsum":
        out = _cumsum(b)
    elif op in ("gather", "scatter"):
        out = _batched_indexing(b, scatter=op == "scatter")
    elif op in COLLECTIVE_OPS:
        out = _collective(b, op)
    else:
        raise NotSimulable(f"no instance generator for `{op}`")
    base, dist = b.graphs(out)
    return Instance(mesh, base, dist, b.inputs, f"mesh {mesh}: " + "; ".join(b.lines))


# What a query atom about an operand asks of it, as a hint for the instance generators.
_HINTS = (
    ("(= {} (Shard ", "shard"),
    ("(FreeAlong {} ", "broadcast"),
    ("(= {} (Coord ", "coord"),
    ("(Inv {} ", "inv"),
    ("(Base {})", "base"),
    ("(= {} (Splat ", "splat"),
    ('(= {} (Op1 "broadcast"', "broadcast"),
)


def operand_hints(rule) -> list[str | None]:
    """What the rule asks of each operand of its top op, read from its egglog query."""
    top = next(a for a in rule.query if a.startswith("(= ?n0 "))
    operands = top.rstrip(")").split()[5:]
    hints: list[str | None] = []
    for var in operands:
        kind = None
        for atom in rule.query:
            if atom.startswith(f"(= {var} (Partial "):
                op = atom.split()[4]
                kind = "partial:" + (op.strip('"') if op.startswith('"') else "?")
                continue
            for prefix, hint in _HINTS:
                if atom.startswith(prefix.format(var)):
                    kind = hint
                    break
            else:
                if re.match(rf"\(= {re.escape(var)} \(Op\d ", atom):
                    kind = "op:" + atom.split()[3].strip('"')
        hints.append(kind)
    return hints


def _ops_of(rule_name: str, rules: CompiledRuleSet) -> list[str]:
    """The ops a rule's match can bind at its top: read from its first query atom."""
    rule = next(r for r in rules.rules if r.name == rule_name)
    top = next(a for a in rule.query if a.startswith("(= ?n0 "))
    arity = int(top.split()[2].removeprefix("(Op"))
    op = top.split()[3].strip('"')
    if not op.startswith("?"):
        return [op]
    family_atom = next(a for a in rule.query if a.startswith(f"(InFamily {op} "))
    family = family_atom.split('"')[1]
    return [m for m in rules.families[family] if arity in OP_ARITY.get(m, ())]


def _scalar_fills(graph: Graph) -> set[int]:
    """Nodes whose term is a size-free fill (shape-free broadcasts, rank-0 literals): they
    stand for a value of whatever shape their users pin, so they are not compared alone."""
    return shape_free_nodes(graph) | {
        n.id for n in graph.nodes.values() if n.op == "constant" and n.shape == ()
    }


def check_instance(
    instance: Instance, program: str, rule_names: list[str], seed: int
) -> tuple[bool, list[str]]:
    """Run one instance; returns (the rule fired, relations that fail numerically).

    Shape-free fills are skipped: their terms stand for a value of any shape and are only
    meaningful through the elementwise users that pin it.
    """
    from .verify import Limits, prove

    proof = prove(
        instance.base,
        instance.dist,
        program,
        instance.mesh,
        instance.inputs,
        Limits(max_rounds=30, simulate=False),
    )
    proven = proof.relations
    fired = any(proof.stats.rule_matches.get(name, 0) for name in rule_names)
    unchecked = _scalar_fills(instance.dist)
    unchecked_base = _scalar_fills(instance.base)
    rng = np.random.default_rng(seed)
    base_inputs = {i: random_input(instance.base.node(i), rng) for i in instance.base.inputs}
    dist_inputs = {
        r.dist_id: distribute(base_inputs[r.base_id], r.layout, instance.mesh, rng)
        for r in instance.inputs
    }
    base_values = run_baseline(instance.base, base_inputs)
    dist_values = run_spmd(instance.dist, dist_inputs, instance.mesh)
    failures = []
    given = {(r.dist_id, canonical(r.layout), r.base_id) for r in instance.inputs}
    for dist_id, relations in proven.items():
        if dist_id in unchecked:
            continue
        for layout, base_id in relations:
            if (dist_id, canonical(layout), base_id) in given or base_id in unchecked_base:
                continue
            mismatch = compare_output(
                dist_id, base_values[base_id], dist_values[dist_id], layout, instance.mesh, rng
            )
            if mismatch:
                failures.append(
                    f"n{dist_id} ~ n{base_id} @ {layout_str(layout)} is false: "
                    f"{mismatch.describe().replace('output', 'node', 1)}"
                )
    return fired, failures


def _suppliers(group: list, rules: CompiledRuleSet) -> list:
    """Rules that build the non-op terms (a device coordinate) this rule's pattern needs."""
    needs_coord = any("(Coord " in atom for rule in group for atom in rule.query)
    return [
        r
        for r in rules.rules
        if r not in group and needs_coord and any("(Coord " in action for action in r.actions)
    ]


def fuzz_rules(rules: CompiledRuleSet, budget: int, seed: int = 0) -> list[RuleReport]:
    """Check every rule on `budget` random instances of the ops it matches. A rule that
    lowers to several egglog rules (`spread`) is checked as one, cycling through the
    expansions to bias the instances."""
    reports = []
    families = emit_families(rules.families)
    for compiled in rules.files:
        groups: dict[str, list] = {}
        for rule in compiled.rules:
            groups.setdefault(rule_name(rule.name), []).append(rule)
        for name, group in groups.items():
            report = RuleReport(name, group[0].source)
            program = families + "\n" + emit_rules(compiled.path, group + _suppliers(group, rules))
            ops = _ops_of(group[0].name, rules)
            for k in range(budget):
                instance_seed = seed * 1_000_003 + k
                rng = np.random.default_rng([instance_seed, len(name)])
                op = ops[int(rng.integers(len(ops)))]
                hints = operand_hints(group[k % len(group)])
                try:
                    instance = generate(op, rng, hints)
                    fired, failures = check_instance(
                        instance, program, [r.name for r in group], instance_seed
                    )
                except NotSimulable:
                    continue
                report.instances += 1
                report.fired += fired
                report.unsound += [
                    f"seed {instance_seed}: {f}\n    instance: {instance.text}" for f in failures
                ]
                if report.unsound:
                    break
            reports.append(report)
    return reports
