"""Numeric fuzzing of canonical rules: random instances of each rule's pattern, the rule
applied at the root, and numpy as judge.

An instance is built bottom up from the pattern: a value variable is a random input (the
same input each time the variable appears), an op pattern a random instance of that op over
the operands built so far (`OVER`: attributes and shape drawn to fit the operands). Where the
rule matches and its guards hold, the graph as built and the graph with the root rewritten
run on the same random inputs; any difference is an unsound rule, reported with the instance.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable

import numpy as np

from scalify.canon.rewriter import CanonRules, RewriteFailed, counter
from scalify.compiler import ast
from scalify.ir import Graph, Node
from scalify.simulate.spmd import random_input, run_baseline, values_close
from scalify.soundness.fuzz import RuleReport
from scalify.values import NotSimulable

Shape = tuple[int, ...]
DRAWS_PER_INSTANCE = 20
# op -> (rng, operand shapes) -> (attributes, output shape), or None when no instance fits
Over = Callable[[np.random.Generator, list[Shape]], tuple[dict, Shape] | None]


def _transpose(rng: np.random.Generator, shapes: list[Shape]):
    (shape,) = shapes
    perm = tuple(int(d) for d in rng.permutation(len(shape)))
    if rng.random() < 0.3:  # the identity, so that rules about it fire
        perm = tuple(range(len(shape)))
    return {"perm": perm}, tuple(shape[d] for d in perm)


def _broadcast(rng: np.random.Generator, shapes: list[Shape]):
    (shape,) = shapes
    rank = len(shape) + int(rng.integers(0, 3))
    dims = tuple(sorted(int(d) for d in rng.choice(rank, size=len(shape), replace=False)))
    out = [int(rng.integers(1, 4)) for _ in range(rank)]
    for k, d in enumerate(dims):
        out[d] = shape[k]
    return {"dims": dims}, tuple(out)


def _reshape(rng: np.random.Generator, shapes: list[Shape]):
    (shape,) = shapes
    if rng.random() < 0.25:
        return {}, shape  # the same shape, so that rules about it fire
    left, out = math.prod(shape), []
    while left > 1 and len(out) < 3:
        divisors = [d for d in range(2, left + 1) if left % d == 0]
        size = int(rng.choice(divisors))
        out.append(size)
        left //= size
    if left > 1:
        out.append(left)
    return {}, tuple(out) or (1,)


def _elementwise(rng: np.random.Generator, shapes: list[Shape]):
    if any(s != shapes[0] for s in shapes):
        return None
    return {}, shapes[0]


def _select(rng: np.random.Generator, shapes: list[Shape]):
    if shapes[1] != shapes[2] or shapes[0] not in ((), shapes[1]):
        return None
    return {}, shapes[1]


def _compare(rng: np.random.Generator, shapes: list[Shape]):
    drawn = _elementwise(rng, shapes)
    direction = ("EQ", "NE", "LT", "LE", "GT", "GE")[int(rng.integers(6))]
    return None if drawn is None else ({"direction": direction}, drawn[1])


def _take(rng: np.random.Generator, shapes: list[Shape]):
    table, index = shapes
    if not table:
        return None
    dim = int(rng.integers(len(table)))
    return {"dim": dim}, tuple(index) + table[:dim] + table[dim + 1 :]


def _slice(rng: np.random.Generator, shapes: list[Shape]):
    (shape,) = shapes
    starts, limits, strides = [], [], []
    for n in shape:
        whole = rng.random() < 0.5
        lo = 0 if whole else int(rng.integers(0, n))
        hi = n if whole else int(rng.integers(lo + 1, n + 1))
        step = 1 if whole or rng.random() < 0.6 else 2
        starts.append(lo), limits.append(hi), strides.append(step)
    out = tuple(-(-(hi - lo) // step) for lo, hi, step in zip(starts, limits, strides, strict=True))
    return {"starts": tuple(starts), "limits": tuple(limits), "strides": tuple(strides)}, out


def _merge(rng: np.random.Generator, shapes: list[Shape]):
    (shape,) = shapes
    if len(shape) < 2:
        return None
    p = int(rng.integers(len(shape) - 1))
    merged = shape[:p] + (shape[p] * shape[p + 1],) + shape[p + 2 :]
    return {"dim": p, "inner": shape[p + 1]}, merged


def _split(rng: np.random.Generator, shapes: list[Shape]):
    (shape,) = shapes
    if not shape:
        return None
    p = int(rng.integers(len(shape)))
    divisors = [d for d in range(1, shape[p] + 1) if shape[p] % d == 0]
    inner = int(rng.choice(divisors))
    return {"dim": p, "inner": inner}, shape[:p] + (shape[p] // inner, inner) + shape[p + 1 :]


def _reduce(rng: np.random.Generator, shapes: list[Shape]):
    (shape,) = shapes
    dims = tuple(d for d in range(len(shape)) if rng.random() < 0.5)
    op = ("sum", "max", "min")[int(rng.integers(3))]
    return {"dims": dims, "op": op}, tuple(n for d, n in enumerate(shape) if d not in dims)


def _pad(rng: np.random.Generator, shapes: list[Shape]):
    shape, fill = shapes
    if fill != ():
        return None
    widths = [(int(rng.integers(0, 3)), int(rng.integers(0, 3))) for _ in shape]
    out = tuple(n + lo + hi for n, (lo, hi) in zip(shape, widths, strict=True))
    return {"padding": "x".join(f"{lo}_{hi}" for lo, hi in widths)}, out


OVER: dict[str, Over] = {
    "transpose": _transpose,
    "broadcast": _broadcast,
    "reshape": _reshape,
    **{
        op: _elementwise
        for op in ("add", "sub", "mul", "div", "max", "min", "and", "or")
        + ("neg", "exp", "tanh", "not", "convert")
    },
    "select": _select,
    "compare": _compare,
    "take": _take,
    "slice": _slice,
    "merge": _merge,
    "split": _split,
    "reduce": _reduce,
    "pad": _pad,
}

# what an operand must be, by op and position: a predicate, an index, a scalar, a value
# that may be empty (a pad of nothing)
OPERANDS: dict[str, tuple[str | None, ...]] = {
    "select": ("pred", None, None),
    "take": (None, "index"),
    "pad": ("maybe_empty", "scalar"),
}
# the dtypes an op's result may have other than its operands'
RESULT_DTYPES: dict[str, tuple[str, ...]] = {
    "compare": ("pred",),
    "convert": ("f32", "s32", "pred"),
}


class _Instance:
    """One random graph built from a pattern, node by node."""

    def __init__(self, rng: np.random.Generator, ops: dict[str, tuple[str, ...]]) -> None:
        self.rng = rng
        self.dtype = "s32" if rng.random() < 0.3 else "f32"
        self.ops = ops  # the rule's op variables, each drawn once from its family
        self.chosen: dict[str, str] = {}
        self.nodes: dict[int, Node] = {}
        self.inputs: list[int] = []
        self.values: dict[str, int] = {}
        self.lines: list[str] = []

    def _add(
        self, op: str, operands: tuple[int, ...], shape: Shape, attrs: dict, dtype: str = ""
    ) -> int:
        node_id = len(self.nodes)
        self.nodes[node_id] = Node(
            node_id, op, operands, shape, dtype or self.dtype, attrs, name=f"n{node_id}"
        )
        return node_id

    def value(self, name: str, kind: str | None = None) -> int:
        """The value of a pattern variable: a random input, or now and then a fill of a
        small literal (zero among them), so that guards about fills can hold. `kind`: what
        the op reading it needs (OPERANDS)."""
        if name not in self.values:
            rank = int(self.rng.choice(4, p=(0.3, 0.25, 0.25, 0.2)))
            shape = tuple(int(self.rng.integers(1, 4)) for _ in range(rank))
            if self.values and self.rng.random() < 0.8:  # operands of one elementwise op
                shape = self.nodes[list(self.values.values())[-1]].shape
            dtype = {"pred": "pred", "index": "s32"}.get(kind or "", self.dtype)
            if kind == "scalar":
                shape = ()
            if kind == "maybe_empty" and shape and self.rng.random() < 0.4:
                shape = (0, *shape[1:])
            if self.rng.random() < 0.3:
                text = str(self.rng.integers(0, 3))
                if dtype == "pred":
                    text = "true" if self.rng.random() < 0.5 else "false"
                literal = self._add("constant", (), (), {"value": text}, dtype)
                node_id = self._add("broadcast", (literal,), shape, {"dims": ()}, dtype)
                self.lines.append(f"n{node_id}: a fill of {text}")
            else:
                node_id = self._add("parameter", (), shape, {"index": len(self.inputs)}, dtype)
                self.inputs.append(node_id)
                self.lines.append(f"n{node_id}: {dtype}{list(shape)} ({name})")
            self.values[name] = node_id
        return self.values[name]

    def build(self, pattern: ast.App) -> int:
        op = pattern.name
        if op in self.ops:
            if op not in self.chosen:
                self.chosen[op] = str(self.rng.choice(self.ops[op]))
            op = self.chosen[op]
        kinds = OPERANDS.get(op, ())
        operands = tuple(
            self.value(a.name, kinds[k] if k < len(kinds) else None)
            if isinstance(a, ast.Var)
            else self.build(a)
            for k, a in enumerate(pattern.args)
        )
        over = OVER.get(op)
        if over is None:
            raise NotSimulable(f"no instance generator for `{op}` (canon_fuzz.OVER)")
        drawn = over(self.rng, [self.nodes[o].shape for o in operands])
        if drawn is None:
            raise NotSimulable("operands of unequal shapes")
        attrs, shape = drawn
        data = self.nodes[operands[1 if op == "select" else 0]].dtype if operands else ""
        dtype = data
        if op in RESULT_DTYPES:
            dtype = str(self.rng.choice(RESULT_DTYPES[op]))
            if op == "convert":
                attrs = {"dtype": dtype}
        node_id = self._add(op, operands, shape, attrs, dtype)
        args = ", ".join(f"n{o}" for o in operands)
        self.lines.append(f"n{node_id} = {op}{attrs or ''}({args}): {dtype}{list(shape)}")
        return node_id

    def graph(self, output: int) -> Graph:
        return Graph("canon-fuzz", self.nodes, list(self.inputs), [output])


def _outputs(graph: Graph, inputs: dict[int, np.ndarray]) -> np.ndarray:
    return run_baseline(graph, inputs)[graph.outputs[0]]


def fuzz_canon_rule(rule: ast.CanonRule, budget: int, seed: int) -> RuleReport:
    """Up to `budget` random instances of `rule`; a rewrite that changes a value is unsound."""
    report = RuleReport(rule.name, f"{rule.span.path}:{rule.span.line}")
    rules = CanonRules([rule])
    rng = np.random.default_rng(seed)
    # Draws the rule does not fire on do not count: a guarded rule is drawn until it has
    # fired `budget` times, or for at most DRAWS_PER_INSTANCE times the budget.
    for _ in range(budget * DRAWS_PER_INSTANCE):
        if report.fired >= budget:
            break
        instance = _Instance(rng, dict(rule.ops))
        try:
            root = instance.build(rule.match)
        except NotSimulable:
            continue
        before = instance.graph(root)
        inputs = {i: random_input(before.nodes[i], rng) for i in before.inputs}
        try:  # an instance numpy cannot run (logic on floats) is no instance
            with np.errstate(all="ignore"):
                want = _outputs(before, inputs)
        except (NotSimulable, ValueError, IndexError, TypeError):
            continue
        after = copy.deepcopy(before)
        fired: dict[str, int] = {}
        try:
            new_id = counter(after.nodes)
            same = rules.rewrite(after.nodes[root], after.nodes, fired, new_id, strict=True)
            after.nodes[root] = after.nodes.pop(root)  # after the ops its rewrite made
        except RewriteFailed as err:
            report.instances += 1
            report.unsound.append(f"{err}: " + "; ".join(instance.lines))
            continue
        if same is not None:
            after.outputs = [same]
        report.instances += 1
        if not fired:
            continue
        report.fired += 1
        try:
            with np.errstate(all="ignore"):
                got = _outputs(after, inputs)
        except (NotSimulable, ValueError, IndexError, TypeError) as err:
            report.unsound.append(
                f"the rewritten instance does not run ({err}): " + "; ".join(instance.lines)
            )
            continue
        if np.shape(want) != np.shape(got) or not np.all(values_close(want, got)[3]):
            report.unsound.append(
                "instance: " + "; ".join(instance.lines) + f" rewrote to {after.nodes[root].op}"
                f"{after.nodes[root].attrs or ''}: the values differ"
            )
    return report


def fuzz_canon_rules(rules: list[ast.CanonRule], budget: int, seed: int) -> list[RuleReport]:
    return [fuzz_canon_rule(rule, budget, seed) for rule in rules]
