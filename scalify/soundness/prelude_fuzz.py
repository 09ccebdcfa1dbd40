"""Random instances of the prelude's rules over sub-axes and masks, for `scalify rules lint`.

The rule files' rules are fuzzed from their own patterns (`fuzz.py`). The rules that live in
`engine/prelude.egg` because they read facts the engine computes (the sub-axis pairing of
`engine/sub_axes.py`, the iota facts of a mask, the axis sets a dim is cut over) have no
`.srl` pattern to instantiate, so
each has a generator here. It builds the rule's pattern, and part of the time a near miss
(a group of another size, the two axes in the other order, another bound, a finite fill),
and the instance is checked as a rule file's is: every relation the proof states is run on
every device and compared with the baseline.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np

from scalify.compiler.compile import CompiledRuleSet
from scalify.ir import Node
from scalify.layout import Layout, Placement, local_shape
from scalify.mesh import Mesh, sub_axes
from scalify.simulate.kernels import apply
from scalify.soundness.fuzz import Builder, Instance, RuleReport, check_instances
from scalify.values import NotSimulable, host

PRELUDE = "scalify/engine/prelude.egg"

# Sub-axes need an axis with a proper divisor; two axes, a dim split over both.
_SUB_AXIS_MESHES = (
    (("tp", 4),),
    (("tp", 6),),
    (("dp", 2), ("tp", 4)),
    (("tp", 4), ("dp", 2)),
)
_TWO_AXIS_MESHES = (
    (("dp", 2), ("tp", 2)),
    (("fsdp", 2), ("sp", 3)),
    (("dp", 3), ("tp", 2)),
)
_ONE_AXIS_MESHES = ((("tp", 2),), (("fsdp", 2), ("tp", 3)), (("sp", 4),))
_MASK_MESHES = ((("tp", 2),), (("dp", 2), ("tp", 2)))


@dataclass(frozen=True)
class PreludeRule:
    """A prelude rule and how to build random instances that tempt it."""

    names: tuple[str, ...]  # the egglog rules (a rule and its mirror count as one)
    meshes: tuple[tuple[tuple[str, int], ...], ...]
    generate: Callable[[Builder], int]


def _both(b: Builder, op: str, base_operands, dist_operands, dtype: str, attrs: dict) -> int:
    """One node on each side over different operands (a mask only the distributed program
    has), shapes from the one-device kernel."""
    node_id = b.next_id
    b.next_id += 1
    for side, operands in ((b.base, base_operands), (b.dist, dist_operands)):
        probe = Node(node_id, op, operands, (), dtype, dict(attrs), name=f"n{node_id}")
        args = [host(np.zeros(side[o].shape), side[o].dtype) for o in operands]
        shape = apply(probe, args, [side[o].dtype for o in operands]).shape
        side[node_id] = Node(node_id, op, operands, shape, dtype, dict(attrs), name=f"n{node_id}")
    b.lines.append(f"n{node_id} = {op}{attrs}(base {base_operands} / dist {dist_operands})")
    return node_id


def _view(b: Builder, op: str, x: int, dim: int, base_inner: int, dist_inner: int) -> int:
    """A split of dim `dim` (or a merge of it with the next) with another inner size on each
    side: the distributed view of a device's block, the baseline's of the whole."""

    def per_side(side):
        shape, inner = side[x].shape, base_inner if side is b.base else dist_inner
        if op == "split":
            if shape[dim] % inner:
                raise NotSimulable("the inner size does not divide the dim")
            out = shape[:dim] + (shape[dim] // inner, inner) + shape[dim + 1 :]
        else:
            out = shape[:dim] + (shape[dim] * shape[dim + 1],) + shape[dim + 2 :]
            if shape[dim + 1] != inner:
                raise NotSimulable("a merge's inner size is its operand's")
        return {"dim": dim, "inner": inner}, out

    return b.op(op, (x,), "f32", {}, per_side)


def _shape_with(b: Builder, rank: int, dim: int, size: int) -> tuple[int, ...]:
    shape = [int(b.rng.integers(1, 4)) for _ in range(rank)]
    shape[dim] = size
    return tuple(shape)


def _sub_axis_views(b: Builder) -> int:
    """A device's block of k entries split into [1, k] where the baseline splits the whole
    into rows of k * q (GQA's query heads grouped by KV head, q devices a group), then part
    of the time merged back; or a value held over the two sub-axes, merged."""
    axis = next((a for a, n in b.mesh.axes if n >= 4), None)
    if axis is None:
        raise NotSimulable("no axis with a proper divisor")
    n = b.mesh.axis_size(axis)
    q = int(b.rng.choice([d for d in range(2, n) if n % d == 0]))
    k = int(b.rng.integers(1, 3))
    rank = int(b.rng.integers(1, 3))
    dim = int(b.rng.integers(rank))
    m = b.maybe_wrong(k * q)  # a near miss: a group of another size
    if b.rng.random() < 0.35:  # held over the sub-axes already: the merge alone
        outer, inner = sub_axes(axis, q) if b.rng.random() < 0.8 else sub_axes(axis, q)[::-1]
        shape = _shape_with(b, rank, dim, n // q)
        shape = shape[: dim + 1] + (k * q,) + shape[dim + 1 :]
        layout = (Placement("shard", outer, dim=dim), Placement("shard", inner, dim=dim + 1))
        y = b.input(shape, "f32", layout)
        return _view(b, "merge", y, dim, m, k)
    x = b.input(_shape_with(b, rank, dim, n * k), "f32", (Placement("shard", axis, dim=dim),))
    y = _view(b, "split", x, dim, m, k)
    if b.rng.random() < 0.5:
        return y
    return _view(b, "merge", b.op("exp", (y,), "f32", {}), dim, m, k)


def _two_axis_views(b: Builder) -> int:
    """A dim split over two mesh axes (one row of the outer's blocks a device, its columns'
    block over the inner), split into [1, k] where the baseline splits it into rows of
    k * q; and merged back (OPT merges batch x sequence into rows)."""
    (o, n_o), (i, n_i) = b.mesh.axes if b.rng.random() < 0.5 else b.mesh.axes[::-1]
    k = int(b.rng.integers(1, 3))
    rank = int(b.rng.integers(1, 3))
    dim = int(b.rng.integers(rank))
    # o the more significant: a near miss part of the time holds the blocks the other way
    first, second = (o, i) if b.rng.random() < 0.8 else (i, o)
    layout: Layout = (Placement("shard", first, dim=dim), Placement("shard", second, dim=dim))
    x = b.input(_shape_with(b, rank, dim, n_o * n_i * k), "f32", layout)
    m = b.maybe_wrong(k * n_i)
    y = _view(b, "split", x, dim, m, k)
    if b.rng.random() < 0.4:
        return y
    return _view(b, "merge", b.op("neg", (y,), "f32", {}), dim, m, k)


def _one_axis_views(b: Builder) -> int:
    """A dim split over one axis a, beside a true unit dim before it: a device's block of k
    entries split into [1, k] where the baseline splits the whole into [1, k * |a|]; or the
    unit merged with the split dim (Mamba-2's `[1, heads]`, the heads over fsdp). Near miss:
    another inner size in the baseline."""
    a, n = b.mesh.axes[int(b.rng.integers(len(b.mesh.axes)))]
    k = int(b.rng.integers(1, 3))
    rank = int(b.rng.integers(1, 3))
    dim = int(b.rng.integers(rank))
    m = b.maybe_wrong(k * n)
    if b.rng.random() < 0.5:
        x = b.input(_shape_with(b, rank, dim, n * k), "f32", (Placement("shard", a, dim=dim),))
        y = _view(b, "split", x, dim, m, k)
        return y if b.rng.random() < 0.5 else b.op("exp", (y,), "f32", {})
    shape = _shape_with(b, rank, dim, 1)
    shape = shape[: dim + 1] + (n * k,) + shape[dim + 1 :]
    y = b.input(shape, "f32", (Placement("shard", a, dim=dim + 1),))
    return _view(b, "merge", b.op("neg", (y,), "f32", {}), dim, m, k)


def _joined_rows(b: Builder) -> int:
    """Rows partial over two axes, reduce-scattered over both as one (a device's block of
    the rows by its joint coordinate), then split into [1, k] where the baseline splits
    them into rows of k * q: the rows read apart into the outer axis's and the inner's
    (Mixtral's tokens, batch x sequence, split back over fsdp and sp)."""
    (o, n_o), (i, n_i) = b.mesh.axes
    k = int(b.rng.integers(1, 3))
    rank = int(b.rng.integers(1, 3))
    dim = int(b.rng.integers(rank))
    shape = _shape_with(b, rank, dim, n_o * n_i * k)
    x = b.input(shape, "f32", (Placement("partial", f"{o},{i}"),))
    local = list(shape)
    local[dim] = k
    groups = b.mesh.groups((o, i))
    attrs = {"groups": groups, "dim": dim, "op": "sum"}
    scattered = b.dist_only("reduce_scatter", (x,), tuple(local), "f32", attrs)
    m = b.maybe_wrong(k * n_i)
    if (n_o * n_i * k) % m:
        raise NotSimulable("the inner size does not divide the rows")
    split = b.next_id
    b.next_id += 1
    for side, operand, inner in ((b.base, x, m), (b.dist, scattered, k)):
        held = side[operand].shape
        out = held[:dim] + (held[dim] // inner, inner) + held[dim + 1 :]
        attrs = {"dim": dim, "inner": inner}
        side[split] = Node(split, "split", (operand,), out, "f32", attrs, name=f"n{split}")
    b.lines.append(f"n{split} = split(dim {dim}, inner {m} / local {k})")
    return split


def _constant(b: Builder, value: str, shape: tuple[int, ...], dtype: str) -> int:
    """A scalar literal broadcast to `shape`, on the distributed side only."""
    c = b.dist_only("constant", (), (), dtype, {"value": value})
    return b.dist_only("broadcast", (c,), shape, dtype, {"dims": ()})


def _mask(b: Builder, at_least: bool) -> int:
    """`where(index < m, pad(x), -inf)` (or `index >= m ? -inf : pad(x)`) along the padded
    dim, the index an iota of the dim (or of it alone, broadcast); then, most of the time,
    what a softmax does with it (a max over the dim; exp then a sum), so the -inf the
    relation claims is checked by the values that read it."""
    rank = int(b.rng.integers(1, 3))
    dim = int(b.rng.integers(rank))
    m = int(b.rng.integers(2, 6))
    n = m + int(b.rng.integers(1, 4))
    layout: Layout = (Placement("padded", "", dim=dim, size=n),)
    if rank > 1 and b.rng.random() < 0.4:  # and split over the axis along another dim
        other = (dim + 1) % rank
        layout += (Placement("shard", b.axis, dim=other),)
    shape = _shape_with(b, rank, dim, m)
    if rank > 1:
        shape = tuple(s * b.unit if d != dim else s for d, s in enumerate(shape))
    x = b.input(shape, "f32", layout)
    local = local_shape(shape, layout, b.mesh)
    along = dim if b.rng.random() < 0.9 else (dim + 1) % rank  # a near miss: another dim
    if b.rng.random() < 0.5:
        index = b.dist_only("iota", (), local, "s32", {"dim": along})
    else:
        line = b.dist_only("iota", (), (local[along],), "s32", {"dim": 0})
        index = b.dist_only("broadcast", (line,), local, "s32", {"dims": (along,)})
    bound = _constant(b, str(b.maybe_wrong(m)), local, "s32")
    direction = "GE" if at_least else "LT"
    if b.rng.random() < 0.1:  # a near miss: the other comparison
        direction = "LT" if at_least else "GE"
    predicate = b.dist_only("compare", (index, bound), local, "pred", {"direction": direction})
    fill = "-inf" if b.rng.random() < 0.85 else str(b.rng.choice(["0", "-1e30"]))
    lowest = _constant(b, fill, local, "f32")
    picks = (predicate, lowest, x) if at_least else (predicate, x, lowest)
    masked = b.dist_only("select", picks, local, "f32", {})
    if b.rng.random() < 0.25:
        b.base_output = x
        return masked
    if b.rng.random() < 0.5:
        return _both(b, "reduce", (x,), (masked,), "f32", {"dims": (dim,), "op": "max"})
    exp = _both(b, "exp", (x,), (masked,), "f32", {})
    return b.op("reduce", (exp,), "f32", {"dims": (dim,), "op": "sum"})


def _broadcast_block(b: Builder) -> int:
    """x (replicated, or split along one of its dims over another axis) broadcast along new
    dims, one of them (e) to n entries on a device where the baseline broadcasts it to
    n * |a| (a mask or positions made for a device's rows of a batch split over a); then,
    part of the time, an exp. (An elementwise user with another operand would leave the
    sizes out of the broadcast's term: a size-free broadcast is `spread`'s, not this
    rule's.) Near misses: another local size along e, another size along the other new dim,
    the new dims at other places in the distributed broadcast."""
    axes = list(b.mesh.axes)
    _, size = axes.pop(int(b.rng.integers(len(axes))))
    rank = int(b.rng.integers(1, 3))
    shape = tuple(int(b.rng.integers(1, 4)) for _ in range(rank))
    layout: Layout = ()
    if axes and b.rng.random() < 0.5:  # split over the other axis along one of its dims
        d = int(b.rng.integers(rank))
        other, other_size = axes[0]
        shape = tuple(s * other_size if i == d else s for i, s in enumerate(shape))
        layout = (Placement("shard", other, dim=d),)
    x = b.input(shape, "f32", layout)
    out_rank = rank + int(b.rng.integers(1, 3))
    new = sorted(b.rng.choice(out_rank, size=out_rank - rank, replace=False).tolist())
    e = new[int(b.rng.integers(len(new)))]
    sizes = {d: int(b.rng.integers(1, 3)) for d in new}
    local = {d: b.maybe_wrong(s) for d, s in sizes.items()}  # a near miss: another size
    base_sizes = {**sizes, e: sizes[e] * size}
    dist_new = new if b.rng.random() < 0.9 else [(d + 1) % out_rank for d in new]

    def per_side(side):
        news, at = (base_sizes, new) if side is b.base else (local, dist_new)
        held = iter(side[x].shape)
        dims = tuple(i for i in range(out_rank) if i not in at)
        out = [news[new[at.index(i)]] if i in at else next(held) for i in range(out_rank)]
        return {"dims": dims}, tuple(out)

    out = b.op("broadcast", (x,), "f32", {}, per_side)
    return out if b.rng.random() < 0.5 else b.op("exp", (out,), "f32", {})


PRELUDE_RULES = (
    PreludeRule(("split-over-sub-axes", "merge-over-sub-axes"), _SUB_AXIS_MESHES, _sub_axis_views),
    PreludeRule(("split-over-two-axes", "merge-over-two-axes"), _TWO_AXIS_MESHES, _two_axis_views),
    PreludeRule(("split-over-one-axis", "merge-over-one-axis"), _ONE_AXIS_MESHES, _one_axis_views),
    PreludeRule(("shard-unjoin",), _TWO_AXIS_MESHES, _joined_rows),
    PreludeRule(("mask-fills-padding",), _MASK_MESHES, lambda b: _mask(b, at_least=False)),
    PreludeRule(("mask-fills-padding-ge",), _MASK_MESHES, lambda b: _mask(b, at_least=True)),
    PreludeRule(("broadcast-block",), _TWO_AXIS_MESHES + _SUB_AXIS_MESHES, _broadcast_block),
)


def _instance(rule: PreludeRule, rng: np.random.Generator, k: int) -> Instance:
    mesh = Mesh(rule.meshes[int(rng.integers(len(rule.meshes)))])
    b = Builder(rng, mesh)
    out = rule.generate(b)
    base, dist = b.graphs(out)
    return Instance(mesh, base, dist, b.inputs, f"mesh {mesh}: " + "; ".join(b.lines))


def fuzz_prelude(rules: CompiledRuleSet, budget: int, seed: int = 0) -> list[RuleReport]:
    """Check each prelude rule above on `budget` random instances, with every shipped rule
    loaded (a mask's -inf is read by the rule files' padding rules)."""
    reports = []
    for rule in PRELUDE_RULES:
        name = " / ".join(rule.names)
        report = RuleReport(name, f"{PRELUDE} ({name})")
        make = partial(_instance, rule)
        check_instances(report, make, rules.program(), list(rule.names), budget, seed)
        reports.append(report)
    return reports
