"""Numeric fuzzing of the externs (`scalify/externs/`): random small programs of the shapes
each reads, the extern applied, and what it claims checked on every device with numpy.

An extern decides in Python what no rule can phrase, and an unsound one proves a wrong
program as easily as an unsound rule, so each is checked like a rule:

- `int_ranges`: the range of each integer node, and the tests, selects, clamps and extrema
  it folds. Every value a node takes (on every device, inputs drawn in their assumed ranges,
  a lookup's index in its table's rows) lies in its range, and each folded node's values are
  the values of what it was folded to. Integers wrap around as the dtype does, so a range
  that ignores wrap-around is caught.
- `index_forms`: the affine form of each integer node evaluates to the node's values; a
  predicate's bounds on affine forms decide it; a block ("index in block coord") is the
  predicate it was read from; what the block decides (`decide`) and what equals the block's
  offset (`equals_offset`) hold wherever the index is in the block; a vocab guard's branch
  (`guarded_index_range`) lies in the block where it is taken; `a + c*r` is that.
- `device_tables`: a per-device table, or an integer scalar of the device id, folded into
  coordinate arithmetic computes on every device what the table did: the program before and
  after the fold run on every device on the same inputs, every node compared.

Each extern has a generator below that builds its shapes (and near misses: a block of
another size, a table one entry off), a report like a rule's, and the claims it checked by
kind; lint fails when a claim is false or a kind never comes up.

`IndexReader` reads an integer convert as the value it converts only where the target holds
every value the operand can take (`int_ranges.converts_exactly`); a narrowing convert of values
that wrap is a test of its own in tests/test_extern_fuzz.py.
"""

from __future__ import annotations

import copy
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from scalify.externs import device_tables, index_forms, int_ranges
from scalify.externs.index_forms import Block, IndexReader
from scalify.externs.int_ranges import dtype_bounds, is_int_dtype
from scalify.ir import Graph, Node
from scalify.simulate.kernels import apply
from scalify.soundness.fuzz import RuleReport
from scalify.values import NotSimulable, host

Shape = tuple[int, ...]
# each instance is run on this many draws of its inputs (each device drawing its own)
DRAWS = 3


@dataclass
class ExternReport(RuleReport):
    """A rule's report, and how many claims of each kind the extern made and were checked."""

    claims: Counter = field(default_factory=Counter)
    kinds: tuple[str, ...] = ()  # the kinds of claim that must come up

    def summary(self) -> str:
        counts = ", ".join(f"{k} {self.claims[k]}" for k in self.kinds)
        return f"extern {self.name}: {self.instances} instances, applied on {self.fired} ({counts})"


# ---- running a program on every device, integers wrapping as their dtype does --------------


def _wrapped(value: np.ndarray, dtype: str) -> np.ndarray:
    """The value as the dtype holds it (the kernels compute integers in int64)."""
    if not is_int_dtype(dtype) or dtype[1:] == "64":
        return value
    lo, hi = dtype_bounds(dtype)
    return (np.asarray(value).astype(np.int64) - lo) % (hi - lo + 1) + lo


def _evaluate(node: Node, args: list, dtypes: list[str]) -> np.ndarray:
    try:
        value = np.asarray(apply(node, args, dtypes))
    except (ValueError, IndexError, TypeError, KeyError) as err:
        raise NotSimulable(f"`{node.op}` does not run: {err}") from None
    return _wrapped(value, node.dtype).reshape(node.shape)


def run_devices(graph: Graph, inputs: dict[int, list[np.ndarray]], devices: int):
    """Every node's value on every device (`rank_index` is the device's id)."""
    values: dict[int, list[np.ndarray]] = {}
    for node in graph.nodes.values():
        if node.id in inputs:
            values[node.id] = inputs[node.id]
        elif node.op == "rank_index":
            values[node.id] = [host(np.asarray(d), node.dtype) for d in range(devices)]
        else:
            dtypes = [graph.nodes[o].dtype for o in node.operands]
            values[node.id] = [
                _evaluate(node, [values[o][d] for o in node.operands], dtypes)
                for d in range(devices)
            ]
    return values


def _draw(node: Node, valid: tuple[int, int] | None, rng: np.random.Generator, wide: bool):
    """A random input: in its valid range when it has one (its ends drawn often), else small,
    and with `wide` now and then anywhere in its dtype."""
    if node.dtype == "pred":
        return rng.random(node.shape) < 0.5
    if not is_int_dtype(node.dtype):
        return rng.standard_normal(node.shape)
    lo, hi = valid or ((-6, 6) if not wide or rng.random() < 0.7 else dtype_bounds(node.dtype))
    value = rng.integers(lo, hi, size=node.shape, endpoint=True)
    if value.size and rng.random() < 0.6:  # an end of the range: where off-by-ones show
        value.flat[int(rng.integers(value.size))] = lo if rng.random() < 0.5 else hi
    return host(value, node.dtype)


# ---- building random programs ------------------------------------------------------------------


class Program:
    """A program built node by node, each node evaluated as it is added on a few draws on
    every device (`samples`: what generators read to bias their constants)."""

    def __init__(self, rng: np.random.Generator, devices: int, wide: bool = True) -> None:
        self.rng = rng
        self.devices = devices
        self.wide = wide
        self.nodes: dict[int, Node] = {}
        self.inputs: list[int] = []
        self.valid: dict[int, tuple[int, int]] = {}  # input -> the range it is drawn in
        self.lines: list[str] = []
        self.samples: dict[int, list[np.ndarray]] = {}  # node -> its value per draw x device
        self.kind = ""  # what the generator built, for the report's counts

    def add(self, op: str, operands, shape: Shape, dtype: str, attrs: dict | None = None) -> int:
        node_id = len(self.nodes)
        node = Node(node_id, op, tuple(operands), tuple(shape), dtype, dict(attrs or {}))
        node.name = f"n{node_id}"
        self.nodes[node_id] = node
        if op == "rank_index":
            every = range(DRAWS * self.devices)  # draw by draw, device by device
            self.samples[node_id] = [host(np.asarray(k % self.devices), dtype) for k in every]
        else:
            dtypes = [self.nodes[o].dtype for o in operands]
            self.samples[node_id] = [
                _evaluate(node, [self.samples[o][k] for o in operands], dtypes)
                for k in range(DRAWS * self.devices)
            ]
        shown = {k: v for k, v in node.attrs.items() if k != "value"}
        what = node.attrs["value"] if op == "constant" else f"{op}{shown or ''}"
        args = f"({', '.join(f'n{o}' for o in operands)})" if operands else ""
        self.lines.append(f"n{node_id} = {what}{args}: {dtype}{list(shape)}")
        return node_id

    def input(self, shape: Shape, dtype: str, valid=None, assumed=None) -> int:
        """An input; `assumed`: the range the program states (`assumed_range`); `valid`: the
        range its values are drawn in (the assumed one, by default)."""
        node_id = len(self.nodes)
        attrs: dict = {"name": f"x{len(self.inputs)}", "index": len(self.inputs)}
        if assumed is not None:
            attrs["assumed_range"] = assumed
        valid = valid if valid is not None else assumed
        node = Node(node_id, "parameter", (), tuple(shape), dtype, attrs, name=f"n{node_id}")
        self.nodes[node_id] = node
        self.inputs.append(node_id)
        if valid is not None:
            self.valid[node_id] = valid
        self.samples[node_id] = [
            _draw(node, valid, self.rng, self.wide) for _ in range(DRAWS * self.devices)
        ]
        said = f" assumed in {list(assumed)}" if assumed else ""
        said += f" drawn in {list(valid)}" if valid and valid != assumed else ""
        self.lines.append(f"n{node_id}: {dtype}{list(shape)}{said}")
        return node_id

    def const(self, value, dtype: str) -> int:
        if is_int_dtype(dtype):  # a literal the dtype holds
            lo, hi = dtype_bounds(dtype)
            value = min(max(int(value), lo), hi)
        return self.add("constant", (), (), dtype, {"value": str(value)})

    def fill(self, value, shape: Shape, dtype: str) -> int:
        c = self.const(value, dtype)
        return self.add("broadcast", (c,), shape, dtype, {"dims": ()}) if shape else c

    def spread(self, scalar: int, shape: Shape) -> int:
        node = self.nodes[scalar]
        return (
            self.add("broadcast", (scalar,), shape, node.dtype, {"dims": ()}) if shape else scalar
        )

    def binary(self, op: str, a: int, b: int) -> int:
        return self.add(op, (a, b), self.nodes[a].shape, self.nodes[a].dtype)

    def compare(self, a: int, b: int, direction: str) -> int:
        return self.add("compare", (a, b), self.nodes[a].shape, "pred", {"direction": direction})

    def device(self, dtype: str = "u32") -> int:
        pid = self.add("rank_index", (), (), "u32", {"kind": "partition"})
        return pid if dtype == "u32" else self.add("convert", (pid,), (), dtype, {"dtype": dtype})

    def coordinate(self, stride: int, count: int, dtype: str) -> int:
        """XLA's `(id / stride) % count`, in `dtype`."""
        pid = self.add("rank_index", (), (), "u32", {"kind": "partition"})
        by = self.add("div", (pid, self.const(stride, "u32")), (), "u32")
        found = self.add("rem", (by, self.const(count, "u32")), (), "u32")
        return (
            found if dtype == "u32" else self.add("convert", (found,), (), dtype, {"dtype": dtype})
        )

    def seen(self, node_id: int) -> np.ndarray:
        """Every value the node took on the sample draws."""
        return np.concatenate([np.ravel(v) for v in self.samples[node_id]])

    def graph(self) -> Graph:
        """The program, every computed node an output (what a fold makes of each is then
        read from the outputs)."""
        outputs = [i for i, n in self.nodes.items() if n.op != "parameter"]
        devices = self.devices if self.devices > 1 else None
        graph = Graph("extern-fuzz", dict(self.nodes), list(self.inputs), outputs)
        graph.num_partitions = devices
        return graph

    def text(self) -> str:
        return f"{self.devices} device(s): " + "; ".join(self.lines)

    def draws(self, count: int) -> list[dict[int, list[np.ndarray]]]:
        """`count` fresh draws of the inputs, each device its own."""
        return [
            {
                i: [
                    _draw(self.nodes[i], self.valid.get(i), self.rng, self.wide)
                    for _ in range(self.devices)
                ]
                for i in self.inputs
            }
            for _ in range(count)
        ]


def _pick(rng: np.random.Generator, items):
    return items[int(rng.integers(len(items)))]


def _near(rng: np.random.Generator, seen: np.ndarray) -> int:
    """A constant near the values a node took: its least or greatest, one past either, or
    one in between (what a range may decide a test against)."""
    lo, hi = int(seen.min()), int(seen.max())
    return int(_pick(rng, [lo, hi, lo - 1, hi + 1, (lo + hi) // 2, lo - 3, hi + 3]))


# ---- int_ranges ---------------------------------------------------------------------------------


_INT_DTYPES = ("s32", "s32", "s32", "s16", "s8")
_DIRECTIONS = ("LT", "LE", "GT", "GE", "EQ", "NE")


def _lookup_index(p: Program, shape: Shape, dtype: str) -> int:
    """An index input a lookup reads (in [0, rows) by the lookups' contract), under JAX's
    wrap of negative indices or a constant guard part of the time."""
    rows = int(p.rng.integers(2, 7))
    i = p.input(shape, dtype, valid=(0, rows - 1))
    index = i
    roll = p.rng.random()
    if roll < 0.3:  # i < 0 ? i + rows : i
        negative = p.compare(i, p.fill(0, shape, dtype), "LT")
        wrapped = p.binary("add", i, p.fill(rows, shape, dtype))
        index = p.add("select", (negative, wrapped, i), shape, dtype)
    elif roll < 0.45:  # where(i != ignore, i, 0)
        kept = p.compare(i, p.fill(int(p.rng.integers(-2, 2)), shape, dtype), "NE")
        index = p.add("select", (kept, i, p.fill(0, shape, dtype)), shape, dtype)
    table = p.input((rows, 2), "f32")
    p.add("take", (table, index), (*shape, 2), "f32", {"dim": 0})
    return index


def _vocab_guard(p: Program, shape: Shape, dtype: str) -> list[int]:
    """A vocab-parallel lookup's guard: `i` outside the device's block of c rows gives 0,
    inside `i - c*r` (`guarded_index_range`); and its local index."""
    c = int(p.rng.integers(2, 5))
    i = p.input(shape, dtype, valid=(0, c * p.devices - 1))
    r = p.coordinate(1, p.devices, dtype)
    start = p.add("mul", (r, p.const(c, dtype)), (), dtype)
    end = p.add("add", (start, p.const(p.rng.choice([c, c, c + 1]), dtype)), (), dtype)
    below = p.compare(i, p.spread(start, shape), "LT")
    above = p.compare(i, p.spread(end, shape), "GE")
    outside = p.binary("or", below, above)
    local = p.binary("sub", i, p.spread(start, shape))
    guarded = p.add("select", (outside, p.fill(0, shape, dtype), local), shape, dtype)
    table = p.input((c, 2), "f32")
    p.add("take", (table, guarded), (*shape, 2), "f32", {"dim": 0})
    return [local, guarded]


def int_program(rng: np.random.Generator) -> Program:
    """Integer code over a few leaves (iotas, inputs with assumed ranges, lookup indices, a
    device id, clamps, a vocab guard) and a few random ops over them, tests among them with
    constants near the values their operands take."""
    p = Program(rng, int(_pick(rng, [1, 2, 4])))
    dtype = str(_pick(rng, _INT_DTYPES))
    shape: Shape = (
        (int(rng.integers(2, 6)),) if rng.random() < 0.7 else (int(rng.integers(2, 4)), 2)
    )
    ints: list[int] = []
    preds: list[int] = []
    for _ in range(int(rng.integers(2, 5))):
        roll = rng.random()
        if roll < 0.2:
            ints.append(p.add("iota", (), shape, dtype, {"dim": int(rng.integers(len(shape)))}))
        elif roll < 0.4:
            lo = int(rng.integers(-5, 4))
            ints.append(p.input(shape, dtype, assumed=(lo, lo + int(rng.integers(0, 7)))))
        elif roll < 0.55:
            ints.append(_lookup_index(p, shape, dtype))
        elif roll < 0.65 and p.devices > 1:
            ints.append(p.spread(p.device(dtype), shape))
        elif roll < 0.75 and p.devices > 1:
            ints += _vocab_guard(p, shape, dtype)
        elif roll < 0.9:
            lo = int(rng.integers(-4, 3))
            x = p.input(shape, dtype)
            high = p.fill(lo + int(rng.integers(0, 6)), shape, dtype)
            ints.append(p.add("clamp", (p.fill(lo, shape, dtype), x, high), shape, dtype))
        else:
            ints.append(p.input(shape, dtype))
    for _ in range(int(rng.integers(3, 10))):
        x = _pick(rng, ints)
        roll = rng.random()
        if roll < 0.35:  # a test against a constant near x's values, or two values
            other = (
                p.fill(_near(rng, p.seen(x)), shape, dtype)
                if rng.random() < 0.75
                else _pick(rng, ints)
            )
            preds.append(p.compare(x, other, str(_pick(rng, _DIRECTIONS))))
        elif roll < 0.45 and len(preds) >= 1:
            a = _pick(rng, preds)
            if rng.random() < 0.3:
                preds.append(p.add("not", (a,), shape, "pred"))
            else:
                preds.append(p.binary(str(_pick(rng, ["and", "or"])), a, _pick(rng, preds)))
        elif roll < 0.6 and preds:
            ints.append(p.add("select", (_pick(rng, preds), x, _pick(rng, ints)), shape, dtype))
        elif roll < 0.7:
            op = str(_pick(rng, ["min", "max"]))
            other = p.fill(_near(rng, p.seen(x)), shape, dtype) if rng.random() < 0.6 else None
            ints.append(p.binary(op, x, other if other is not None else _pick(rng, ints)))
        elif roll < 0.8:
            lo = _near(rng, p.seen(x))
            high = p.fill(lo + int(rng.integers(0, 6)), shape, dtype)
            ints.append(p.add("clamp", (p.fill(lo, shape, dtype), x, high), shape, dtype))
        elif roll < 0.88:
            op = str(_pick(rng, ["add", "sub", "mul"]))
            scale = 1 if rng.random() < 0.9 else 4096  # large: where a dtype wraps around
            literal = p.fill(int(rng.integers(-3, 5)) * scale, shape, dtype)
            other = _pick(rng, ints) if rng.random() < 0.5 else literal
            ints.append(p.binary(op, x, other))
        elif roll < 0.93:
            op = str(_pick(rng, ["div", "rem"]))
            ints.append(p.binary(op, x, p.fill(int(rng.integers(1, 5)), shape, dtype)))
        elif roll < 0.96:
            ints.append(p.add("neg", (x,), shape, dtype))
        elif preds:
            ints.append(p.add("convert", (_pick(rng, preds),), shape, dtype, {"dtype": dtype}))
    if rng.random() < 0.3:  # into another dtype, where a range may no longer fit
        other = str(_pick(rng, [d for d in ("s8", "s16", "s32") if d != dtype]))
        p.add("convert", (_pick(rng, ints),), shape, other, {"dtype": other})
    p.kind = "ints"
    return p


def _differ(want: np.ndarray, got: np.ndarray) -> str | None:
    """Where two values of a node differ: None when equal everywhere (a folded node's
    value may be its operand's of the same shape, or a scalar's fill)."""
    try:
        got = np.broadcast_to(got, np.shape(want))
    except ValueError:
        return f"shape {np.shape(got)} where {np.shape(want)} was"
    same = (want == got) | (
        np.isnan(want) & np.isnan(got) if np.asarray(want).dtype.kind == "f" else False
    )
    if np.all(same):
        return None
    at = np.unravel_index(int(np.argmin(same)), np.shape(want)) if np.ndim(want) else ()
    return f"at {[int(i) for i in at]} {np.asarray(want)[at]} before, {np.asarray(got)[at]} after"


def _folded_claims(before: Graph, after: Graph, positions: list[int], draws) -> list[str]:
    """Each node before a fold against what the fold made of it (read from the outputs),
    on every device of every draw."""
    failures: list[str] = []
    devices = before.num_partitions or 1
    for inputs in draws:
        was = run_devices(before, inputs, devices)
        now = run_devices(after, inputs, devices)
        for k, node_id in enumerate(positions):
            new = after.outputs[k]
            for d in range(devices):
                problem = _differ(was[node_id][d], now[new][d])
                if problem:
                    node = before.nodes[node_id]
                    made = after.nodes[new]
                    into = f"n{new} ({made.op})" if new != node_id else f"{made.op}"
                    failures.append(
                        f"n{node_id} ({node.op}) folded into {into} differs on device {d}: "
                        f"{problem}"
                    )
                    return failures
    return failures


def check_int_ranges(p: Program, claims: Counter) -> list[str]:
    """`fold_int_ranges` (with `guarded_index_range`, as canonicalisation runs it): every
    value in its range, every fold the same values."""
    before = p.graph()
    after = copy.deepcopy(before)
    positions = list(after.outputs)
    ranges = int_ranges.fold_int_ranges(after, index_forms.guarded_index_range)
    computed = [i for i in ranges if after.nodes[i].op not in ("parameter", "constant")]
    claims["ranges"] += len(computed)
    folds = sum(
        new != old or after.nodes[old].op != before.nodes[old].op
        for old, new in zip(positions, after.outputs, strict=True)
    )
    claims["folds"] += folds
    claims["assumed inputs"] += sum(
        "assumed_range" in after.nodes[i].attrs and "assumed_range" not in before.nodes[i].attrs
        for i in after.inputs
    )
    draws = p.draws(DRAWS)
    devices = p.devices
    for inputs in draws:
        for graph, when in ((after, "after"), (before, "before")):
            values = run_devices(graph, inputs, devices)
            for node_id, (lo, hi) in ranges.items():
                if node_id not in graph.nodes or not is_int_dtype(graph.nodes[node_id].dtype):
                    continue
                for d in range(devices):
                    v = values[node_id][d]
                    if v.size and (v.min() < lo or v.max() > hi):
                        bad = v.min() if v.min() < lo else v.max()
                        return [
                            f"n{node_id} ({graph.nodes[node_id].op}) has range [{lo}, {hi}] "
                            f"but is {bad} on device {d} ({when} the folds)"
                        ]
    return _folded_claims(before, after, positions, draws)


# ---- index_forms --------------------------------------------------------------------------------


def _form_value(terms: dict[int, int], const: int, values, d: int, shape: Shape):
    """An affine form's value on device d, or None when an atom has another shape."""
    total = np.full(shape, const, dtype=np.int64)
    for atom, k in terms.items():
        v = np.asarray(values[atom][d]).astype(np.int64)
        if v.size == 1:
            v = v.reshape(())
        elif v.shape != tuple(shape):
            return None
        total = total + k * v
    return total


def _aligned(x: np.ndarray, shape: Shape) -> np.ndarray | None:
    """Values at an index's positions read at a node's (a row-major view of the same
    elements, or the index's dims leading), or None."""
    shape = tuple(shape)
    if x.shape == shape:
        return x
    if x.size == 1:
        return np.broadcast_to(x.reshape(()), shape)
    if x.size == math.prod(shape):
        return x.reshape(shape)
    if shape[: x.ndim] == x.shape:
        return np.broadcast_to(x.reshape(x.shape + (1,) * (len(shape) - x.ndim)), shape)
    return None


def _offset(block: Block, values, d: int) -> np.ndarray:
    return np.asarray(values[block.index][d]).astype(np.int64) - block.size * int(
        np.asarray(values[block.coord][d]).reshape(())
    )


def _inside(block: Block, values, d: int) -> np.ndarray:
    offset = _offset(block, values, d)
    return (offset >= 0) & (offset < block.size)


def _block_text(block: Block) -> str:
    return f"n{block.index} - {block.size} * n{block.coord} in [0, {block.size})"


def _bounds_hold(bounds, values, d: int, shape: Shape) -> np.ndarray | None:
    held = np.ones(shape, dtype=bool)
    for form, (lo, hi) in bounds.items():
        value = _form_value(dict(form), 0, values, d, shape)
        if value is None:
            return None
        held &= (value >= lo) & (value <= hi)
    return held


def check_index_forms(p: Program, claims: Counter) -> list[str]:
    """Every claim an `IndexReader` makes about the program, on every device."""
    graph = p.graph()
    reader = IndexReader(copy.deepcopy(graph))
    nodes = reader.nodes
    ranges = int_ranges.fold_int_ranges(copy.deepcopy(graph), index_forms.guarded_index_range)
    ints = [n for n in nodes.values() if is_int_dtype(n.dtype)]
    preds = [n for n in nodes.values() if n.dtype == "pred"]
    forms = {n.id: reader.affine(n.id) for n in ints}
    forms = {i: f for i, f in forms.items() if f is not None and f != ({i: 1}, 0)}
    bounds = {n.id: reader.constraints(n.id) for n in preds}
    bounds = {i: b for i, b in bounds.items() if b is not None}
    blocks = {n.id: reader.block(n.id) for n in preds}
    blocks = {i: b for i, b in blocks.items() if b is not None}
    distinct = sorted({b for b, _ in blocks.values()}, key=str)
    decided = {(n.id, b): reader.decide(n.id, b) for n in preds for b in distinct}
    decided = {k: v for k, v in decided.items() if v is not None}
    offsets = [(n.id, b) for n in ints for b in distinct if reader.equals_offset(n.id, b)]
    guards = {n.id: index_forms.guarded_index_range(n, dict(nodes)) for n in ints}
    guards = {i: g for i, g in guards.items() if g is not None}
    sums = {n.id: index_forms.array_plus_block(reader, ranges, n.id) for n in ints}
    sums = {i: s for i, s in sums.items() if s is not None}
    found = {"forms": forms, "predicates": bounds, "blocks": blocks, "decisions": decided}
    found |= {"offsets": offsets, "guards": guards, "a + c*r": sums}
    claims.update({kind: len(made) for kind, made in found.items()})
    for inputs in p.draws(DRAWS):
        values = run_devices(graph, inputs, p.devices)
        for d in range(p.devices):
            problem = _index_claims(
                nodes, values, d, forms, bounds, blocks, decided, offsets, guards, sums
            )
            if problem:
                return [f"{problem} on device {d}"]
    return []


def _index_claims(nodes, values, d, forms, bounds, blocks, decided, offsets, guards, sums):
    """The first claim that does not hold on device d, or None."""
    for node_id, (terms, const) in forms.items():
        shape = nodes[node_id].shape
        want = _form_value(terms, const, values, d, shape)
        if want is None:
            return f"n{node_id}'s form has an atom of another shape"
        if not np.array_equal(want, values[node_id][d]):
            text = " + ".join(f"{k}*n{a}" for a, k in terms.items())
            return f"n{node_id} is not its affine form {text} + {const}"
    for node_id, (found, negated) in bounds.items():
        held = _bounds_hold(found, values, d, nodes[node_id].shape)
        if held is None:
            return f"n{node_id}'s bounds have an atom of another shape"
        if not np.array_equal(held != negated, values[node_id][d]):
            return f"n{node_id} is not the bounds {found} read from it (negated: {negated})"
    for node_id, (block, negated) in blocks.items():
        pred = values[node_id][d]
        inside = _aligned(_inside(block, values, d), np.shape(pred))
        if inside is not None and not np.array_equal(inside != negated, pred):
            return f"n{node_id} is not `{_block_text(block)}` (negated: {negated})"
    for (node_id, block), value in decided.items():
        pred = np.asarray(values[node_id][d])
        inside = _aligned(_inside(block, values, d), pred.shape)
        if inside is not None and np.any(inside & (pred != value)):
            return f"n{node_id} is not {value} where `{_block_text(block)}`"
    for node_id, block in offsets:
        value = np.asarray(values[node_id][d])
        inside = _aligned(_inside(block, values, d), value.shape)
        offset = _aligned(_offset(block, values, d), value.shape)
        if inside is not None and offset is not None and np.any(inside & (offset != value)):
            return f"n{node_id} is not the offset where `{_block_text(block)}`"
    for node_id, (branch, (lo, hi)) in guards.items():
        test, first, _ = nodes[node_id].operands
        taken = values[test][d] if branch == first else ~values[test][d]
        value = values[branch][d]
        if np.any(taken & ((value < lo) | (value > hi))):
            return f"n{node_id}'s branch n{branch} leaves [{lo}, {hi}] where it is taken"
    for node_id, (a, r, c, n) in sums.items():
        coordinate = int(np.asarray(values[r][d]).reshape(()))
        if not 0 <= coordinate < n:
            return f"n{r} is {coordinate}, outside [0, {n})"
        if not np.array_equal(values[node_id][d], values[a][d] + c * coordinate):
            return f"n{node_id} is not n{a} + {c} * n{r}"
    return None


def _coordinate_scalar(p: Program, n: int, dtype: str) -> tuple[int, int]:
    """A scalar in [0, n) a block is counted by: an input, a device's coordinate, or two
    coordinates joined (`c_a * n_b + c_b`); and what its values run up to."""
    roll = p.rng.random()
    if roll < 0.35 or p.devices < 2:
        return p.input((), dtype, valid=(0, n - 1)), n
    if roll < 0.75 or p.devices < 4:
        return p.coordinate(1, p.devices, dtype), p.devices
    outer = p.coordinate(2, p.devices // 2, dtype)
    inner = p.coordinate(1, 2, dtype)
    scaled = p.add("mul", (outer, p.const(2, dtype)), (), dtype)
    return p.add("add", (scaled, inner), (), dtype), p.devices


def index_program(rng: np.random.Generator) -> Program:
    """A device's block of c entries of an index: its offset `i - c*r` in one of several
    spellings, "in the block" in one of several (either way round, negated, under views),
    and what a lookup does with them (guards, clamps, tests the block decides); a block of
    another size part of the time."""
    p = Program(rng, int(_pick(rng, [1, 2, 4])), wide=False)
    dtype = "s32"
    shape: Shape = (
        (int(rng.integers(2, 6)),) if rng.random() < 0.7 else (int(rng.integers(2, 4)), 2)
    )
    c = int(rng.integers(2, 5))
    r, n = _coordinate_scalar(p, 3, dtype)
    i = p.input(shape, dtype, valid=(-1, c * n))
    spelling = rng.random()
    if spelling < 0.4:
        start = p.add("mul", (r, p.const(c, dtype)), (), dtype)
        local = p.binary("sub", i, p.spread(start, shape))
    elif spelling < 0.7:
        start = p.add("mul", (p.const(-c, dtype), r), (), dtype)
        local = p.binary("add", i, p.spread(start, shape))
    else:
        scaled = p.binary("mul", p.spread(r, shape), p.fill(c, shape, dtype))
        local = p.binary("sub", i, scaled)
    wrong = c if rng.random() < 0.8 else c + int(_pick(rng, [-1, 1]))  # a near miss
    zero, size = p.fill(0, shape, dtype), p.fill(wrong, shape, dtype)
    if rng.random() < 0.5:
        inside = p.binary("and", p.compare(local, zero, "GE"), p.compare(local, size, "LT"))
    else:
        below = p.compare(zero, local, "GT") if rng.random() < 0.5 else p.compare(local, zero, "LT")
        inside = p.binary("or", below, p.compare(local, p.fill(wrong - 1, shape, dtype), "GT"))
        if rng.random() < 0.5:
            inside = p.add("not", (inside,), shape, "pred")
    if rng.random() < 0.3:  # viewed: a unit dim more, or the index's dims leading
        viewed = (*shape, 1) if rng.random() < 0.5 else (*shape, 2)
        dims = tuple(range(len(shape)))
        op, attrs = ("reshape", {}) if viewed[-1] == 1 else ("broadcast", {"dims": dims})
        p.add(op, (inside,), viewed, "pred", attrs)
    # what a guarded lookup does with the local index
    value = local
    roll = rng.random()
    if roll < 0.3:
        value = p.add("clamp", (zero, local, p.fill(c - 1, shape, dtype)), shape, dtype)
    elif roll < 0.5:
        value = p.binary("min", local, p.fill(c - 1 + int(rng.integers(0, 2)), shape, dtype))
        value = p.binary("max", value, zero)
    negated = p.nodes[inside].op == "or"
    picks = (inside, zero, value) if negated else (inside, value, zero)
    guarded = p.add("select", picks, shape, dtype)
    p.add("convert", (guarded,), shape, "s16", {"dtype": "s16"})
    test = p.fill(int(_pick(rng, [0, c - 1, c, c + 1])), shape, dtype)
    p.compare(value, test, str(_pick(rng, _DIRECTIONS)))
    p.add("reshape", (value,), (math.prod(shape),), dtype)
    p.kind = "blocks"
    return p


# ---- device_tables ------------------------------------------------------------------------------

_DEVICE_MESHES = ((2,), (3,), (4,), (2, 2), (2, 3), (3, 2), (2, 2, 2), (4, 2), (2, 4))


def _strides(sizes: Shape) -> list[int]:
    """Each mesh axis's stride in device ids (the first axis the most significant)."""
    return [math.prod(sizes[k + 1 :]) for k in range(len(sizes))]


def _table(p: Program, values, dtype: str) -> int:
    text = "{" + ", ".join(str(int(v)) for v in values) + "}"
    return p.add("constant", (), (len(values),), dtype, {"value": text})


def _look_up(p: Program, table: int, index: int) -> int:
    """`dynamic-slice(table, index)` of one entry, as a scalar."""
    dtype = p.nodes[table].dtype
    entry = p.add("dynamic_slice", (table, index), (1,), dtype, {"sizes": (1,)})
    return p.add("reshape", (entry,), (), dtype)


def _perturbed(rng: np.random.Generator, values: list[int]) -> list[int]:
    """The table most of the time; part of the time one entry off (a near miss)."""
    values = [int(v) for v in values]
    if rng.random() < 0.2:
        values[int(rng.integers(len(values)))] += int(_pick(rng, [1, 3]))
    return values


def device_program(rng: np.random.Generator) -> Program:
    """A per-device table and what reads it: an offset table indexed by the device id (one
    axis's coordinate, or several axes' counted together), a coordinate table then an offset
    table indexed by it, a table indexed by other arithmetic on the id, or an integer scalar
    of the id alone (`fold_device_scalars`); each read as a slice's start and added to
    positions."""
    sizes = _pick(rng, _DEVICE_MESHES)
    devices = math.prod(sizes)
    p = Program(rng, devices)
    strides = _strides(sizes)
    ids = np.arange(devices)
    coords = [(ids // s) % n for s, n in zip(strides, sizes, strict=True)]
    dtype = str(_pick(rng, ["s32", "s32", "u32"]))
    t0 = int(_pick(rng, [0, 0, 0, 5]))
    k = int(_pick(rng, [1, 2, 16, 64] + ([] if dtype == "u32" else [-8])))
    roll = rng.random()
    axis = int(rng.integers(len(sizes)))
    if roll < 0.3:  # t0 + k * coord, one entry per device
        p.kind = "coordinate tables"
        table = _table(p, _perturbed(rng, list(t0 + k * coords[axis])), dtype)
        value = _look_up(p, table, p.device(str(_pick(rng, ["u32", "s32"]))))
    elif roll < 0.45 and len(sizes) >= 2:  # t0 + k * J, J counted over several axes
        p.kind = "joint tables"
        axes = [int(a) for a in rng.permutation(len(sizes))[: int(rng.integers(2, len(sizes) + 1))]]
        joint = np.zeros(devices, dtype=np.int64)
        for a in axes:
            joint = joint * sizes[a] + coords[a]
        table = _table(p, _perturbed(rng, list(t0 + k * joint)), dtype)
        value = _look_up(p, table, p.device())
    elif roll < 0.65:  # a coordinate table, then offsets by the coordinate
        p.kind = "two-level tables"
        coordinate = _look_up(p, _table(p, list(coords[axis]), "u32"), p.device())
        n = sizes[axis]
        offsets = _perturbed(rng, [t0 + k * j for j in range(n)])
        value = _look_up(p, _table(p, offsets, dtype), coordinate)
    elif roll < 0.8:  # a table indexed by other arithmetic on the device id
        p.kind = "composed tables"
        pid = p.device("s32")
        stride = strides[axis]
        index = p.add("div", (pid, p.const(stride, "s32")), (), "s32")
        if rng.random() < 0.5:
            index = p.add("rem", (index, p.const(sizes[axis], "s32")), (), "s32")
            m = sizes[axis]
        else:
            m = devices // stride
        if rng.random() < 0.3:  # counted down
            index = p.add("sub", (p.const(m - 1, "s32"), index), (), "s32")
        entries = _perturbed(rng, [t0 + k * j for j in range(m)])
        if rng.random() < 0.5:
            entries = entries[::-1]
        value = _look_up(p, _table(p, entries, dtype), index)
    else:  # a scalar of the device id alone: `(r // s) * k`, `(r % n) * k`, floor division
        p.kind = "device scalars"
        pid = p.device("s32")
        stride, n = strides[axis], sizes[axis]
        if rng.random() < 0.5:
            value = p.add("div", (pid, p.const(stride, "s32")), (), "s32")
        else:
            value = p.add("rem", (pid, p.const(n * stride, "s32")), (), "s32")
            if stride > 1:
                value = p.add("div", (value, p.const(stride, "s32")), (), "s32")
        if rng.random() < 0.3:  # JAX's floor division: q - (sign differs and r != 0)
            q = p.add("div", (pid, p.const(stride, "s32")), (), "s32")
            left = p.add("rem", (pid, p.const(stride, "s32")), (), "s32")
            fix = p.add("compare", (left, p.const(0, "s32")), (), "pred", {"direction": "LT"})
            value = p.add(
                "sub", (q, p.add("convert", (fix,), (), "s32", {"dtype": "s32"})), (), "s32"
            )
        value = p.add("mul", (value, p.const(k if k > 0 else 4, "s32")), (), "s32")
        dtype = "s32"
    # what reads it: a slice of an input at it, and positions counted from it
    width = int(rng.integers(1, 3))
    span = min(int(p.seen(value).max()) + width + 1, 80)
    x = p.input((max(span, width),), "f32")
    start = value if dtype == "s32" else p.add("convert", (value,), (), "s32", {"dtype": "s32"})
    p.add("dynamic_slice", (x, start), (width,), "f32", {"sizes": (width,)})
    positions = p.add("iota", (), (3,), "s32", {"dim": 0})
    p.binary("add", positions, p.spread(start, (3,)))
    return p


def check_device_tables(p: Program, claims: Counter) -> list[str]:
    """`fold_device_tables` then `fold_device_scalars`, as canonicalisation runs them: every
    node of the program before against what the folds made of it, on every device."""
    before = p.graph()
    after = copy.deepcopy(before)
    positions = list(after.outputs)
    device_tables.fold_device_tables(after)
    tables = sum(a != b for a, b in zip(positions, after.outputs, strict=True))
    folded = list(after.outputs)
    device_tables.fold_device_scalars(after)
    scalars = sum(a != b for a, b in zip(folded, after.outputs, strict=True))
    if tables + scalars:
        claims[p.kind] += 1
    claims["folds"] += tables + scalars
    return _folded_claims(before, after, positions, p.draws(DRAWS))


# ---- the externs, as lint checks them ----------------------------------------------------------


@dataclass(frozen=True)
class Extern:
    name: str
    source: str
    generate: Callable[[np.random.Generator], Program]
    check: Callable[[Program, Counter], list[str]]
    kinds: tuple[str, ...]  # the kinds of claim lint requires to come up
    applied: str  # the claim kind an instance counts as applied on


EXTERNS = (
    Extern(
        "int_ranges",
        "scalify/externs/int_ranges.py",
        int_program,
        check_int_ranges,
        ("ranges", "folds", "assumed inputs"),
        "folds",
    ),
    Extern(
        "index_forms",
        "scalify/externs/index_forms.py",
        index_program,
        check_index_forms,
        ("forms", "predicates", "blocks", "decisions", "offsets", "guards", "a + c*r"),
        "blocks",
    ),
    Extern(
        "device_tables",
        "scalify/externs/device_tables.py",
        device_program,
        check_device_tables,
        (
            "coordinate tables",
            "joint tables",
            "two-level tables",
            "composed tables",
            "device scalars",
        ),
        "folds",
    ),
)

# instances per extern for each instance a rule gets: an extern's instance runs no e-graph
SCALE = 4
EXTERN_FUZZ = "scalify/soundness/extern_fuzz.py"


def fuzz_extern(extern: Extern, budget: int, seed: int = 0) -> ExternReport:
    """`budget` instances of the extern's shapes; stop at the first false claim, which the
    report keeps with its seed and instance."""
    report = ExternReport(extern.name, extern.source, kinds=extern.kinds)
    for k in range(budget):
        instance_seed = seed * 1_000_003 + k
        rng = np.random.default_rng([instance_seed, len(extern.name)])
        before = report.claims[extern.applied]
        try:
            program = extern.generate(rng)
            failures = extern.check(program, report.claims)
        except NotSimulable:
            continue
        report.instances += 1
        report.fired += report.claims[extern.applied] > before
        if failures:
            report.unsound += [
                f"seed {instance_seed}: {f}\n    instance: {program.text()}" for f in failures
            ]
            break
    return report


def fuzz_externs(budget: int, seed: int = 0) -> list[ExternReport]:
    """Each extern on `SCALE * budget` random instances."""
    return [fuzz_extern(extern, SCALE * budget, seed) for extern in EXTERNS]
