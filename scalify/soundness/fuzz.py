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
from dataclasses import dataclass, field, replace

import numpy as np

from scalify.compiler.compile import CompiledRuleSet
from scalify.compiler.emit import emit_families, emit_rules
from scalify.compiler.lower import rule_name
from scalify.compiler.signatures import OP_ARITY
from scalify.engine.encode import shape_free_nodes
from scalify.errors import ScalifyError
from scalify.ir import Graph, Node
from scalify.layout import (
    IndexMap,
    Layout,
    Placement,
    canonical,
    layout_str,
    local_shape,
    resolve_declared,
)
from scalify.mesh import Mesh
from scalify.ops import spec_of
from scalify.ops.spec import PerSide
from scalify.relations import Relation, check_shape
from scalify.simulate.kernels import apply
from scalify.simulate.spmd import compare_output, distribute, random_input, run_baseline, run_spmd
from scalify.values import NotSimulable, host

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
    # the declared layout kinds' index maps, for reading back what the proof states
    layouts: dict[str, IndexMap] = field(default_factory=dict)


@dataclass
class RuleReport:
    name: str
    source: str
    instances: int = 0
    fired: int = 0
    unsound: list[str] = field(default_factory=list)


class Builder:
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
        # the value layouts (padded, repeated) the rule under test asks of any term, for
        # generators whose pattern nests them below the top op's operands
        self.values: frozenset[str] = frozenset()
        self.next_id = 0
        self.axis = mesh.names[int(rng.integers(len(mesh.names)))]
        self.declared: dict[str, IndexMap] = {}  # the rule set's declared layout kinds
        self.shared_dim = int(rng.integers(3))

    def hint(self, k: int) -> str | None:
        return self.hints[k] if k < len(self.hints) and self.rng.random() < 0.85 else None

    def operand_layout(self, k: int, rank: int, fallback: Layout) -> Layout:
        """Bias operand k toward the layout the rule under test asks for."""
        kind = self.hint(k)
        cuts = kind in ("shard", "padded", "repeated") or str(kind).startswith("laid:")
        if cuts and rank:  # the dim the operands share most of the time
            dim = (
                self.shared_dim % rank if self.rng.random() < 0.7 else int(self.rng.integers(rank))
            )
            if kind.startswith("laid:"):
                name = kind.removeprefix("laid:")
                index_map = self.declared[name]
                return (Placement("laid", self.axis, dim=dim, op=name, index_map=index_map),)
            return self.value_placements(kind, dim) + (Placement("shard", self.axis, dim=dim),)
        if kind in ("partial:sum", "partial:max", "partial:min", "partial:?"):
            op = kind.split(":")[1]
            op = op if op != "?" else ("sum" if self.rng.random() < 0.7 else "max")
            return (Placement("partial", self.axis, op=op),)
        if kind in ("inv", "base"):
            return ()
        return fallback

    def value_placements(self, kind: str, dim: int) -> Layout:
        """What a device's block is cut from, for a rule over padded or repeated values: every
        size the builder draws is at most two units, so three units pads any of them."""
        if kind == "padded":
            content = "lowest" if "lowest" in self.values and self.rng.random() < 0.8 else "sum"
            return (Placement("padded", "", dim=dim, op=content, size=3 * self.unit),)
        if kind == "repeated":
            return (Placement("repeated", "", dim=dim, size=2, unit=int(self.rng.integers(1, 3))),)
        return ()

    def size(self) -> int:
        return self.unit * int(self.rng.integers(1, 3))

    def mesh_stride(self, axis: str) -> int:
        """How far apart in device ids consecutive coordinates of `axis` are."""
        return self.mesh.stride(axis)

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
        if not dtype.startswith(("f", "bf")):  # -inf is a float's lowest value alone
            layout = tuple(replace(p, op="sum") if p.op == "lowest" else p for p in layout)
        if any(p.kind in ("padded", "repeated") for p in layout):
            try:  # a draw the relation checks would refuse
                check_shape(layout, shape, local_shape(shape, layout, self.mesh), self.mesh, "")
            except ScalifyError as err:
                raise NotSimulable(str(err)) from None
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
        per_side: PerSide | None = None,
    ) -> int:
        """Add `op` to both graphs. `per_side(nodes)` gives attributes and the output shape
        for ops whose attributes depend on a side's sizes (broadcast, merge, split, slice)."""
        spec = spec_of(op)
        made = []
        for side in (self.base, self.dist):
            side_attrs, shape = dict(attrs), None
            if per_side:
                extra, shape = per_side(side)
                side_attrs.update(extra)
            probe = Node(-1, op, operands, tuple(shape or ()), dtype, side_attrs)
            if spec.fuzz_shape:  # no one-device kernel
                shape = spec.fuzz_shape(probe, side[operands[0]].shape, self.mesh)
            else:
                args = [host(np.zeros(side[o].shape), side[o].dtype) for o in operands]
                try:
                    shape = apply(probe, args, [side[o].dtype for o in operands]).shape
                except (ValueError, IndexError, TypeError) as err:
                    raise NotSimulable(f"ill-typed instance: {err}") from None
            if spec.check_types:  # a draw HLO would reject; numpy might accept it
                spec.check_types(side_attrs, [side[o].shape for o in operands])
            made.append(({k: v for k, v in side_attrs.items() if not k.startswith("_")}, shape))
        (base_attrs, base_shape), (dist_attrs, dist_shape) = made
        node_id = self._add(op, operands, base_shape, dist_shape, dtype, base_attrs, dist_attrs)
        if spec.collective:  # the baseline has no collective: it is the operand itself
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


def generate(
    op: str,
    rng: np.random.Generator,
    hints: list[str | None] | None = None,
    values: frozenset[str] = frozenset(),
    layouts: dict[str, IndexMap] | None = None,
) -> Instance:
    """A random instance of `op`; `hints` bias operand layouts toward a rule's pattern,
    `values` (`value_kinds`) the value layouts of terms nested deeper."""
    spec = spec_of(op)
    if spec is None or spec.generate is None:
        raise NotSimulable(f"no instance generator for `{op}`")
    mesh = Mesh(MESHES[int(rng.integers(len(MESHES)))])
    b = Builder(rng, mesh)
    b.hints = list(hints or [])
    b.values = values
    b.declared = dict(layouts or {})
    out = spec.generate(b)
    base, dist = b.graphs(out)
    text = f"mesh {mesh}: " + "; ".join(b.lines)
    return Instance(mesh, base, dist, b.inputs, text, b.declared)


# What a query atom about an operand asks of it, as a hint for the instance generators.
_HINTS = (
    ("(= {} (Shard ", "shard"),
    ("(= {} (Padded ", "padded"),
    ("(= {} (Repeated ", "repeated"),
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
            if atom.startswith(f"(= {var} (Laid "):
                kind = "laid:" + atom.split()[3].strip('"')
                continue
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


def value_kinds(rule) -> frozenset[str]:
    """The value layouts (padded, repeated) the rule's query asks of any term; `lowest`
    when it asks for a padding that holds the lowest value."""
    kinds = {"padded": "(Padded ", "repeated": "(Repeated ", "lowest": ' "lowest")'}
    return frozenset(k for k, term in kinds.items() if any(term in a for a in rule.query))


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


# An instance has a few dozen nodes and its proof a few hundred: an e-graph past this size
# is a rule feeding itself, stopped before it takes the machine's memory.
FUZZ_NODE_LIMIT = 20_000


def check_instance(
    instance: Instance, program: str, rule_names: list[str], seed: int
) -> tuple[bool, list[str]]:
    """Run one instance; returns (the rule fired, relations that fail numerically).

    Shape-free fills are skipped: their terms stand for a value of any shape and are only
    meaningful through the elementwise users that pin it.
    """
    from scalify.verify import Limits, prove

    limits = Limits(max_rounds=30, node_limit=FUZZ_NODE_LIMIT, simulate=False, rounds_per_check=1)
    proof = prove(instance.base, instance.dist, program, instance.mesh, instance.inputs, limits)
    proven = proof.relations
    fired = any(proof.stats.rule_matches.get(name, 0) for name in rule_names)
    if fired and proof.stats.limit and "node limit" in proof.stats.limit:
        size = len(instance.base.nodes) + len(instance.dist.nodes)
        return fired, [
            f"the e-graph passed {FUZZ_NODE_LIMIT} nodes on an instance of {size} nodes: a rule "
            "that grows it without bound (each round rewrites what the last one built)"
        ]
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
        for read, base_id in relations:
            if (dist_id, canonical(read), base_id) in given or base_id in unchecked_base:
                continue
            layout = resolve_declared(read, instance.layouts)
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
    """Rules that build the terms this rule's pattern needs: a device coordinate; for a rule
    over padded or repeated values (baseline terms inside a device's block or partial sum),
    the rules that carry blocks and partial sums through ops, which build those terms."""
    needs_coord = any("(Coord " in atom for rule in group for atom in rule.query)
    needs_blocks = any(
        kind in atom for rule in group for atom in rule.query for kind in ("(Padded ", "(Repeated ")
    )
    return [
        r
        for r in rules.rules
        if r not in group
        and (
            (needs_coord and any("(Coord " in action for action in r.actions))
            or (
                needs_blocks
                and any("(Shard " in action or "(Partial " in action for action in r.actions)
            )
        )
    ]


def check_instances(
    report: RuleReport,
    make: Callable[[np.random.Generator, int], Instance],
    program: str,
    rule_names: list[str],
    budget: int,
    seed: int,
) -> RuleReport:
    """Run `budget` instances `make(rng, k)` of a rule, counting those it fired on; stop at
    the first false relation, which the report keeps with its seed and instance."""
    for k in range(budget):
        instance_seed = seed * 1_000_003 + k
        rng = np.random.default_rng([instance_seed, len(report.name)])
        try:
            instance = make(rng, k)
            fired, failures = check_instance(instance, program, rule_names, instance_seed)
        except NotSimulable:
            continue
        report.instances += 1
        report.fired += fired
        report.unsound += [
            f"seed {instance_seed}: {f}\n    instance: {instance.text}" for f in failures
        ]
        if report.unsound:
            break
    return report


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

            def instance(rng: np.random.Generator, k: int, ops=ops, group=group) -> Instance:
                op = ops[int(rng.integers(len(ops)))]
                rule = group[k % len(group)]
                hints = operand_hints(rule)
                return generate(op, rng, hints, value_kinds(rule), rules.layouts)

            names = [r.name for r in group]
            report = check_instances(report, instance, program, names, budget, seed)
            reports.append(report)
    return reports
