"""A dim of size 1 on a device, squeezed away, kept as a dim again: equal forms of a dot
whose operands lost one, and of each squeeze with the unit dim at another place.

One q head per device (heads == tp) is a head dim of size 1 there. XLA squeezes it: the
per-device scores are `dot([b, s, d], [b, d, s])` batched over b alone, where the baseline's
are `dot([b, h, s, d], [b, h, d, s])` batched over (b, h). No rule relates the two, because
the device's dot has lost the dim the shard lives on. Rank normalisation puts it back: the
same dot with the unit dims kept as one more batch pair, `dot([b, 1, s, d], [b, 1, d, s])`,
squeezed, is the device's dot (a batch of one is a plain product), and the shard rules
relate the kept form to the baseline's dot.

- **Dots.** For a dot with at least one operand a squeeze (a merge that drops a unit dim),
  the unit is put back right after the operand's batch dims, where attention's head dim
  sits (`[b, h, s, d]`). An operand that is no squeeze gets a unit dim inserted before each
  of its dims in turn (which dim of it was split from the head dim is not known here; only
  the right one relates to the baseline) and moved to that place.
- **Squeezes.** A squeeze of a unit dim equals the squeeze of the same value with the unit
  dim moved anywhere else first: `[b, 1, s, d] -> [b, s, d]` is also
  `[b, s, 1, d] -> [b, s, d]`, the form in which a row-parallel projection's input is the
  device's block of the baseline's `[b, s, h * d]`.

Every form is an exact identity on values (moving a size-1 dim moves no element), so the
e-graph may union each with the node it equals. Derived when a graph is proved, like the
other alternative forms (unit_dims.py): a mutated graph gets the forms of what it computes.
"""

from __future__ import annotations

from dataclasses import replace

from scalify.ir import Graph, Node, PlacedForms


def with_unit_dot_forms(graph: Graph) -> Graph:
    """A copy of `graph` holding the equal forms described above."""
    copy = replace(graph, nodes=dict(graph.nodes), equalities=list(graph.equalities), derived={})
    _Forms(copy).add()
    return copy


class _Forms:
    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.forms = PlacedForms(graph, "unit")
        self.lifted: list[tuple[int, int]] = []  # (dot, the squeeze of a lifted form of it)
        self.equal: dict[int, list[int]] = {}  # node -> the forms it equals
        for a, b in graph.equalities:
            self.equal.setdefault(a, []).append(b)
            self.equal.setdefault(b, []).append(a)

    def _squeezed(self, node_id: int) -> list[tuple[Node, int]]:
        """(x, u) for the node and each form it equals that is a squeeze of x's unit dim u."""
        forms = [node_id, *self.equal.get(node_id, ())]
        found = (squeezed_unit(self.node(f), self.graph) for f in forms)
        return [squeeze for squeeze in found if squeeze is not None]

    def add(self) -> None:
        nodes = list(self.graph.nodes.values())
        for node in nodes:  # in order: a dot's squeezed forms serve the dots after it
            if node.op == "dot" and any(self._squeezed(o) for o in node.operands):
                self.forms.anchor = node.id
                self._lift_dot(node)
        for dot, squeeze in self.lifted:  # placed after the dot, like the squeeze itself
            self.forms.anchor = dot
            self._moved_squeezes(self.node(squeeze))
        self.forms.place()

    def node(self, node_id: int) -> Node:
        return self.graph.nodes[node_id]

    def _lift_dot(self, dot: Node) -> None:
        """dot(L, R) == squeeze(dot(L', R')), L' and R' with a unit batch pair kept."""
        a = dot.attrs
        sides = []
        for k, operand in enumerate(dot.operands):
            batch = tuple(a["lhs_batch" if k == 0 else "rhs_batch"])
            at = max(batch) + 1 if batch else 0
            sides.append((operand, at, self._with_unit(self.node(operand), at)))
        lhs, rhs = sides
        for left in lhs[2]:
            for right in rhs[2]:
                lifted = self.forms.emit(
                    dot,
                    "dot",
                    (left, right),
                    _with_dim(dot.shape, len(a["lhs_batch"]), 1),
                    {
                        "lhs_batch": (*_shifted(a["lhs_batch"], lhs[1]), lhs[1]),
                        "rhs_batch": (*_shifted(a["rhs_batch"], rhs[1]), rhs[1]),
                        "lhs_contracting": _shifted(a["lhs_contracting"], lhs[1]),
                        "rhs_contracting": _shifted(a["rhs_contracting"], rhs[1]),
                    },
                )
                squeezed = self._squeeze(dot, lifted, len(a["lhs_batch"]))
                self.lifted.append((dot.id, squeezed))
                self.graph.equalities.append((dot.id, squeezed))
                self.equal.setdefault(dot.id, []).append(squeezed)

    def _with_unit(self, operand: Node, at: int) -> list[int]:
        """The operand with a unit dim at `at`: its squeezed value with the unit moved
        there, or (not a squeeze) a unit inserted before each dim in turn, moved there."""
        found = self._squeezed(operand.id)
        if found:
            return [self._move_unit(operand, value.id, unit, at) for value, unit in found[:1]]
        rank = len(operand.shape)
        forms = []
        for before in range(rank + 1):
            if before < rank:
                attrs = {"dim": before, "inner": operand.shape[before]}
            else:
                attrs = {"dim": rank - 1, "inner": 1}
            shape = _with_dim(operand.shape, before, 1)
            split = self.forms.emit(operand, "split", (operand.id,), shape, attrs)
            forms.append(self._move_unit(operand, split, before, at))
        return forms

    def _move_unit(self, like: Node, value: int, unit: int, to: int) -> int:
        """`value` with its unit dim `unit` moved to `to` (the value itself if already)."""
        if unit == to:
            return value
        rank = len(self.node(value).shape)
        perm = [d for d in range(rank) if d != unit]
        perm.insert(to, unit)
        shape = tuple(self.node(value).shape[d] for d in perm)
        return self.forms.emit(like, "transpose", (value,), shape, {"perm": tuple(perm)})

    def _squeeze(self, like: Node, value: int, unit: int) -> int:
        """`value` with its unit dim `unit` merged away (into the next dim, or the last
        into the one before)."""
        shape = self.node(value).shape
        if unit + 1 < len(shape):
            attrs = {"dim": unit, "inner": shape[unit + 1]}
        else:
            attrs = {"dim": unit - 1, "inner": 1}
        squeezed = tuple(n for d, n in enumerate(shape) if d != unit)
        return self.forms.emit(like, "merge", (value,), squeezed, attrs)

    def _moved_squeezes(self, squeeze: Node) -> None:
        """squeeze(x at u) == squeeze(x with the unit moved to t, at t), every t."""
        value, unit = squeezed_unit(squeeze, self.graph)
        for to in range(len(value.shape)):
            if to != unit:
                moved = self._move_unit(squeeze, value.id, unit, to)
                self.graph.equalities.append((squeeze.id, self._squeeze(squeeze, moved, to)))


def squeezed_unit(node: Node, graph: Graph) -> tuple[Node, int] | None:
    """(x, u) when the node is a merge that only drops dim u of x, of size 1; else None."""
    if node.op != "merge":
        return None
    value = graph.nodes[node.operands[0]]
    dim = int(node.attrs["dim"])
    if value.shape[dim] == 1:
        return value, dim
    if value.shape[dim + 1] == 1:
        return value, dim + 1
    return None


def _shifted(dims, at: int) -> tuple[int, ...]:
    """Dims of an operand after a unit dim is inserted at `at`."""
    return tuple(d + 1 if d >= at else d for d in dims)


def _with_dim(shape, at: int, size: int) -> tuple[int, ...]:
    return (*shape[:at], size, *shape[at:])
