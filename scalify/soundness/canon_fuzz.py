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

from scalify.canon.rewriter import CanonRules, RewriteFailed
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


OVER: dict[str, Over] = {
    "transpose": _transpose,
    "broadcast": _broadcast,
    "reshape": _reshape,
    **{op: _elementwise for op in ("add", "sub", "mul", "max", "min", "neg", "exp", "tanh")},
}


class _Instance:
    """One random graph built from a pattern, node by node."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.dtype = "s32" if rng.random() < 0.3 else "f32"
        self.nodes: dict[int, Node] = {}
        self.inputs: list[int] = []
        self.values: dict[str, int] = {}
        self.lines: list[str] = []

    def _add(self, op: str, operands: tuple[int, ...], shape: Shape, attrs: dict) -> int:
        node_id = len(self.nodes)
        self.nodes[node_id] = Node(
            node_id, op, operands, shape, self.dtype, attrs, name=f"n{node_id}"
        )
        return node_id

    def value(self, name: str) -> int:
        """The value of a pattern variable: a random input, or now and then a fill of a
        small literal (zero among them), so that guards about fills can hold."""
        if name not in self.values:
            rank = int(self.rng.choice(4, p=(0.3, 0.25, 0.25, 0.2)))
            shape = tuple(int(self.rng.integers(1, 4)) for _ in range(rank))
            if self.values and self.rng.random() < 0.8:  # operands of one elementwise op
                shape = self.nodes[list(self.values.values())[-1]].shape
            if self.rng.random() < 0.3:
                literal = self._add("constant", (), (), {"value": str(self.rng.integers(0, 3))})
                node_id = self._add("broadcast", (literal,), shape, {"dims": ()})
                self.lines.append(f"n{node_id}: a fill of {self.nodes[literal].attrs['value']}")
            else:
                node_id = self._add("parameter", (), shape, {"index": len(self.inputs)})
                self.inputs.append(node_id)
                self.lines.append(f"n{node_id}: {self.dtype}{list(shape)} ({name})")
            self.values[name] = node_id
        return self.values[name]

    def build(self, pattern: ast.App) -> int:
        operands = tuple(
            self.value(a.name) if isinstance(a, ast.Var) else self.build(a) for a in pattern.args
        )
        over = OVER.get(pattern.name)
        if over is None:
            raise NotSimulable(f"no instance generator for `{pattern.name}` (canon_fuzz.OVER)")
        drawn = over(self.rng, [self.nodes[o].shape for o in operands])
        if drawn is None:
            raise NotSimulable("operands of unequal shapes")
        attrs, shape = drawn
        node_id = self._add(pattern.name, operands, shape, attrs)
        args = ", ".join(f"n{o}" for o in operands)
        self.lines.append(f"n{node_id} = {pattern.name}{attrs or ''}({args})")
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
        instance = _Instance(rng)
        try:
            root = instance.build(rule.match)
        except NotSimulable:
            continue
        before = instance.graph(root)
        after = copy.deepcopy(before)
        fired: dict[str, int] = {}
        try:
            same = rules.rewrite(after.nodes[root], after.nodes, fired, strict=True)
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
        inputs = {i: random_input(before.nodes[i], rng) for i in before.inputs}
        try:
            want, got = _outputs(before, inputs), _outputs(after, inputs)
        except (NotSimulable, ValueError, IndexError) as err:
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
