"""Chains of views in one normal form: split, then one transpose, then merge.

Two programs often reach the same tensor through different reshape and transpose chains:
one splits the heads out of `[b, s, h*d]` and swaps `s` and `h`, another transposes first,
splits, and swaps back; an einsum over a weight viewed as `[m, h, d]` puts the weight first
and permutes its output. The merge/split keys make a shard move through each step, but two
different chains build different terms, and nothing says they are one value.

Symbolic bijection inference says it. Every dim of a chain's result is a run of *atoms*:
factors of the source's dims (`(i, j, k) -> (⊗(i, j), k)`), found by following the chain
step by step (a transpose permutes the runs, a merge joins two, a split cuts one, refining
an atom into two where the cut falls inside it). Any such chain equals the normal form

    split each source dim into its atoms  ->  one transpose  ->  merge each result dim's run

which the e-graph is given as an equal form of the chain's end (built with
`canonicalize._decompose_reshape`, so its steps are the ones a plain reshape gets). Chains
that meet at one value meet at one normal form, whatever steps they took. A dot is a view
of its operands too, for this purpose: `dot(a, b)` equals its swap `dot(b, a)` transposed
(einsum puts either operand first), and a dot over an operand split on a free dim equals the
dot over the unsplit operand, split. Each form is an exact identity (elements are only
moved), checked numerically by `tests/test_view_chains.py`. A dim of size 1 (one head per
device) is an atom of size 1 beside the one it was cut from. A cut that falls inside an
atom it does not divide has no normal form: no bijection of the two index spaces.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace

from scalify.canon.canonicalize import _decompose_reshape
from scalify.ir import Graph, Node, PlacedForms, feeding

VIEWS = frozenset({"split", "merge", "transpose"})
MAX_PATHS = 4  # chains read through equal forms, per node
MAX_UNITS = 2  # unit dims a chain makes whose source place is tried everywhere


def with_view_chain_forms(graph: Graph) -> Graph:
    """A copy of `graph` with the normal form of each view chain not already in it, and the
    swapped and unsplit forms of the dots those chains read."""
    copy = replace(graph, nodes=dict(graph.nodes), equalities=list(graph.equalities), derived={})
    _Forms(copy).add()
    return copy


@dataclass
class ViewAtoms:
    """The atoms of a chain: each source dim's factors (major first), and each dim of the
    current value as a run of atoms."""

    sizes: list[int]
    source: list[list[int]]
    dims: list[list[int]]
    # units a split made as the outer part of a run (a device's one head, in front of its
    # head dim): which source dim they belong to is read several ways. A unit made behind
    # a run (a reduction's kept dim) stays where it is.
    front_units: list[int] = field(default_factory=list)

    @classmethod
    def of(cls, shape: tuple[int, ...]) -> ViewAtoms:
        return cls(list(shape), [[d] for d in range(len(shape))], [[d] for d in range(len(shape))])

    def step(self, node: Node) -> bool:
        """Follow one view step; False where it has no reading in atoms."""
        a = node.attrs
        if node.op == "transpose":
            self.dims = [self.dims[p] for p in a["perm"]]
            return True
        p = int(a["dim"])
        if node.op == "merge":
            self.dims[p : p + 2] = [self.dims[p] + self.dims[p + 1]]
            return True
        return self._split(p, int(a["inner"]))

    def _split(self, p: int, inner: int) -> bool:
        run, size, k = self.dims[p], 1, len(self.dims[p])
        while k and inner % (size * self.sizes[run[k - 1]]) == 0:
            size *= self.sizes[run[k - 1]]
            k -= 1
        if size != inner:  # the cut falls inside atom run[k - 1]: refine it
            if not k:
                return False
            atom, rest = run[k - 1], inner // size
            if self.sizes[atom] % rest:
                return False
            self._refine(atom, rest)  # its new outer atom goes just before it
            run = self.dims[p]
            k = run.index(atom)
            outer, kept = run[:k], run[k:]
        else:
            outer, kept = run[:k], run[k:]
        if not outer:  # a unit dim made in front: an atom of size 1 before the run
            outer = [self._unit(run[0], before=True)]
            self.front_units.append(outer[0])
        if not kept:  # ... or behind it
            kept = [self._unit(run[-1], before=False)]
        self.dims[p : p + 1] = [outer, kept]
        return True

    def _unit(self, beside: int, before: bool) -> int:
        """A new atom of size 1 next to `beside` in its source dim (it moves no element)."""
        unit = len(self.sizes)
        self.sizes.append(1)
        for run in self.source:
            if beside in run:
                at = run.index(beside) + (0 if before else 1)
                run[at:at] = [unit]
        return unit

    def _refine(self, atom: int, inner: int) -> None:
        """Cut `atom` into a new outer atom and itself as the inner one (of size `inner`)."""
        outer = len(self.sizes)
        self.sizes.append(self.sizes[atom] // inner)
        self.sizes[atom] = inner
        for runs in (self.source, self.dims):
            for run in runs:
                if atom in run:
                    at = run.index(atom)
                    run[at:at] = [outer]

    def normal_forms(self) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
        """(the source split into its atoms, the transpose that orders them as the result),
        for each place a unit dim the chain made in front of a run may be read as coming
        from: beside the atom it was cut next to, or in front of any source dim (a device's
        one head is the unit outer part of its heads-and-head-dim columns, wherever a
        reshape put it)."""
        units = self.front_units[:MAX_UNITS]
        placings = [[None, *range(self.rank)] for _ in units]
        forms = []
        for placing in itertools.product(*placings):
            source = [list(run) for run in self.source]
            for unit, dim in zip(units, placing, strict=False):
                if dim is not None:
                    for run in source:
                        if unit in run:
                            run.remove(unit)
                    source[dim].insert(0, unit)
            order = [atom for run in source for atom in run]
            split_shape = tuple(self.sizes[atom] for atom in order)
            perm = tuple(order.index(atom) for run in self.dims for atom in run)
            forms.append((split_shape, perm))
        return forms

    @property
    def rank(self) -> int:
        return len(self.source)

    def made_units(self) -> bool:
        return bool(self.front_units)


class _Forms:
    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.forms = PlacedForms(graph, "view")
        self.equal: dict[int, list[int]] = {}
        for a, b in graph.equalities:
            self._note(a, b)
        self.users: dict[int, list[int]] = graph.users()
        # what the program computes: the forms earlier passes added (unit moves, ...) are
        # no chains of the program, and reading them again would only multiply forms
        self.program = feeding(graph, graph.outputs)
        self.made: set[int] = set()  # the dot forms this pass adds (chains cross them)

    def add(self) -> None:
        nodes = [n for n in self.graph.nodes.values() if n.id in self.program]
        for node in nodes:
            if node.op == "dot":
                self.forms.anchor = node.id
                self._dot_forms(node)
        seen: set[tuple] = set()
        for node in nodes:
            if node.op in VIEWS:
                self.forms.anchor = node.id
                for source, steps in self._chains(node):
                    self._chain_form(node, source, steps, seen)
        self.forms.place()

    def node(self, node_id: int) -> Node:
        return self.graph.nodes[node_id]

    def _note(self, a: int, b: int) -> None:
        self.equal.setdefault(a, []).append(b)
        self.equal.setdefault(b, []).append(a)

    def _equal(self, a: int, b: int) -> None:
        self.graph.equalities.append((a, b))
        self._note(a, b)

    def _weight_first(self, dot: Node) -> bool:
        """Whether the dot's first operand is an input viewed (an einsum that puts a weight
        first, `mhd,bsm->...`): activations first is how both programs write the rest."""
        node = self.node(dot.operands[0])
        while node.op in VIEWS:
            node = self.node(node.operands[0])
        return node.op == "parameter"

    def _feeds_a_transpose(self, node: Node) -> bool:
        return any(self.node(u).op == "transpose" for u in self.users.get(node.id, ()))

    # ---- dots

    def _made(self, node_id: int) -> int:
        self.made.add(node_id)
        return node_id

    def _dot_forms(self, dot: Node) -> None:
        """dot == transpose(swapped dot) where a transpose reads a dot over a weight first
        (einsum's permuted output); each of them == split(the dot of an unsplit operand)
        where an operand is a split of a free dim."""
        forms = [dot.id]
        if self._feeds_a_transpose(dot) and self._weight_first(dot):
            forms.append(self._swapped(dot))
        for form in forms:
            unsplit = self._unsplit(self.node(form))
            if unsplit is not None:
                self._equal(form, unsplit)

    def _swapped(self, dot: Node) -> int:
        a = dot.attrs
        lhs, rhs = (self.node(o) for o in dot.operands)
        batch = len(a["lhs_batch"])
        n_lhs = len(lhs.shape) - batch - len(a["lhs_contracting"])
        n_rhs = len(rhs.shape) - batch - len(a["rhs_contracting"])
        attrs = {
            "lhs_batch": tuple(a["rhs_batch"]),
            "rhs_batch": tuple(a["lhs_batch"]),
            "lhs_contracting": tuple(a["rhs_contracting"]),
            "rhs_contracting": tuple(a["lhs_contracting"]),
        }
        free = dot.shape[batch:]
        shape = (*dot.shape[:batch], *free[n_lhs:], *free[:n_lhs])
        swapped = self.forms.emit(dot, "dot", (rhs.id, lhs.id), shape, attrs)
        perm = (
            *range(batch),
            *(batch + n_rhs + j for j in range(n_lhs)),
            *(batch + j for j in range(n_rhs)),
        )
        moved = self.forms.emit(dot, "transpose", (swapped,), dot.shape, {"perm": perm})
        self._equal(dot.id, self._made(moved))
        return swapped

    def _unsplit(self, dot: Node) -> int | None:
        """split(dot(.., w, ..)) for the first operand that is a split of a free dim of w."""
        a = dot.attrs
        batch = len(a["lhs_batch"])
        position = batch  # where the operand's free dims start in the output
        for k, operand in enumerate(dot.operands):
            side = "lhs" if k == 0 else "rhs"
            fixed = (*a[f"{side}_batch"], *a[f"{side}_contracting"])
            view = self.node(operand)
            free = [d for d in range(len(view.shape)) if d not in fixed]
            if view.op == "split" and {view.attrs["dim"], view.attrs["dim"] + 1} <= set(free):
                p = int(view.attrs["dim"])
                attrs = dict(a)
                for name in ("batch", "contracting"):
                    attrs[f"{side}_{name}"] = _merged_away(a[f"{side}_{name}"], p)
                operands = list(dot.operands)
                operands[k] = view.operands[0]
                at = position + free.index(p)
                shape = list(dot.shape)
                shape[at : at + 2] = [shape[at] * shape[at + 1]]
                whole = self.forms.emit(dot, "dot", tuple(operands), tuple(shape), attrs)
                split = {"dim": at, "inner": view.attrs["inner"]}
                return self._made(self.forms.emit(dot, "split", (whole,), dot.shape, split))
            position += len(free)
        return None

    # ---- chains

    def _chains(self, end: Node) -> list[tuple[Node, list[Node]]]:
        """(source, steps in order) for each way back from `end` through views, crossing to
        a view form of a node that is no view (at most MAX_PATHS ways)."""
        found: list[tuple[Node, list[Node]]] = []

        def walk(node: Node, steps: list[Node], visited: frozenset[int]) -> None:
            if len(found) >= MAX_PATHS:
                return
            if node.op in VIEWS:
                operand = self.node(node.operands[0])
                walk(operand, [node, *steps], visited | {node.id})
                return
            views = [
                self.node(f)
                for f in self.equal.get(node.id, ())
                if f not in visited and f in self.made and self.node(f).op in VIEWS
            ]
            for view in views:
                walk(view, steps, visited | {node.id})
            if not views or len(steps) > 1:
                found.append((node, steps))

        walk(end, [], frozenset())
        return found

    def _chain_form(self, end: Node, source: Node, steps: list[Node], seen: set) -> None:
        """The chain's normal forms, each an equal form of its end (none where the chain
        is one already, or is a lone merge or split: the shard rules read those)."""
        atoms = ViewAtoms.of(source.shape)
        if not all(atoms.step(s) for s in steps):
            return
        permutes = any(s.op == "transpose" for s in steps)
        if not atoms.made_units() and (len(steps) < 2 or not permutes):
            return
        written = [(s.op, _view_attrs(s)) for s in steps]
        for split_shape, perm in atoms.normal_forms():
            key = (end.id, source.id, split_shape, perm)
            if key in seen:
                continue
            seen.add(key)
            planned = self._plan(source, split_shape, perm, end.shape)
            if planned == written:
                continue  # already the normal form
            current = source.id
            for op, attrs in planned:
                shape = _after(self.node(current).shape, op, attrs)
                current = self.forms.emit(end, op, (current,), shape, attrs)
            if current != end.id:
                self._equal(end.id, current)

    def _plan(self, source: Node, split_shape, perm, shape) -> list[tuple[str, dict]]:
        """The normal form's steps: the reshape steps to the atoms, the transpose, the
        reshape steps to the result (as canonicalize.py writes a reshape)."""
        steps = _reshape_steps(source.shape, split_shape)
        if perm != tuple(range(len(perm))):
            steps.append(("transpose", {"perm": perm}))
        permuted = tuple(split_shape[p] for p in perm)
        return steps + _reshape_steps(permuted, tuple(shape))


def _merged_away(dims, p: int) -> tuple[int, ...]:
    """Dims of an operand whose dims p and p+1 become one."""
    return tuple(d - 1 if d > p else d for d in dims)


def _view_attrs(node: Node) -> dict:
    if node.op == "transpose":
        return {"perm": tuple(node.attrs["perm"])}
    return {"dim": int(node.attrs["dim"]), "inner": int(node.attrs["inner"])}


def _reshape_steps(source: tuple[int, ...], target: tuple[int, ...]) -> list[tuple[str, dict]]:
    """The merge and split steps canonicalize.py makes of a reshape from `source` to
    `target` (a run of atoms, so always such steps)."""
    if tuple(source) == tuple(target):
        return []
    operand = Node(0, "parameter", (), tuple(source), "f32", {})
    reshape = Node(1, "reshape", (0,), tuple(target), "f32", {})
    steps = _decompose_reshape(reshape, operand, 2)
    assert all(s.op in VIEWS for s in steps), (source, target)
    return [(s.op, _view_attrs(s)) for s in steps]


def _after(shape: tuple[int, ...], op: str, attrs: dict) -> tuple[int, ...]:
    if op == "transpose":
        return tuple(shape[p] for p in attrs["perm"])
    p, inner = attrs["dim"], attrs["inner"]
    if op == "merge":
        return (*shape[:p], shape[p] * shape[p + 1], *shape[p + 2 :])
    return (*shape[:p], shape[p] // inner, inner, *shape[p + 1 :])
