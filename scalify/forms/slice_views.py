"""Static slices (and reshape views of a matmul's result) moved toward the values they
read, as alternative forms, derived from a graph as it is proved (`with_slice_alternatives`).

A fused projection is computed once and split afterwards: `q, k, v = split(x @ [Wq|Wk|Wv])`,
`g, u = split(x @ [Wg|Wu])`. A correct tensor-parallel version gives each device its block
of every part (a per-block layout: `concat(Wq_r, Wk_r, Wv_r)`, or `[Wg|Wu]` viewed as
(2, ffn) and cut along ffn), and its local split then yields `x @ Wq_r`, ... . No single
layout relates the fused weight or the fused product to the baseline; the parts do. So each
slice of one dim gets an equal form with the slice moved down: into the operand of a `dot`
whose free dim it cuts, into the one piece of a `concatenate` it falls in, through a view
(`merge`, `split`) when it cuts whole rows of the outer dim, and past a `slice_at` along
another dim. Every step is an identity of static shapes, and both graphs get the same
treatment, so `split(x @ w)` on both sides meets at `x @ slice(w)`.

A `split` or `merge` of a dot's free dims moves into the operand they come from the same
way, so `(x @ Wq).reshape(b, s, heads, head_dim)` meets code that projects straight into
heads with `Wq` viewed as (hidden, heads, head_dim).

Like the unit-dim forms (unit_dims.py), these copy the computation they move through, so
they are made from the graph exactly as it stands when proved and never stored in it.
"""

from __future__ import annotations

from dataclasses import replace

from scalify.ir import Graph, Node, dim_slice, place_after
from scalify.ops import ELEMENTWISE


def with_slice_alternatives(
    graph: Graph, baseline: bool, parts: dict[int, set[tuple[int, int, int]]] | None = None
) -> Graph:
    """A copy of `graph` with the moved forms of its one-dim slices, each placed right after
    the slice it equals (graph order stays topological, layer cuts stay where they were).

    The distributed graph gets only the forms that pick a part of a fused value (a moved
    slice that picks a piece of a concatenation or whole rows of a merge); the baseline gets
    every form. An equality in the baseline only joins baseline terms. One in the distributed
    graph can relate a node to two baseline terms that are equal but not joined (the rules
    build them from the node's two forms), and every op after it then doubles the terms the
    proof builds: a slice moved into `x @ split(w)` (RoPE's halves of heads projected
    straight from a viewed weight) did that.

    `parts`: (dim, start, end) cuts of distributed nodes whose layout has parts (a fused
    weight given per part, part_layouts.py); a slice moved onto one of them picks a part."""
    copy = replace(graph, nodes=dict(graph.nodes), equalities=list(graph.equalities), derived={})
    mover = _Mover(copy, parts or {})
    placed: dict[int, list[int]] = {}
    for node in list(copy.nodes.values()):
        cut = one_dim_cut(node, copy)
        pieces = _concatenated_contraction(node, copy)
        if (
            cut is None
            and pieces is None
            and not (baseline and node.op in ("merge", "split", "dot"))
        ):
            continue
        first = mover.next_id
        made = _moved_forms(mover, node, cut, pieces, baseline)
        copy.equalities += [(node.id, f) for f in made]
        if made:
            placed[node.id] = list(range(first, mover.next_id))
    place_after(copy, placed)
    return copy


def _moved_forms(mover: _Mover, node: Node, cut, pieces, baseline: bool) -> list[int]:
    """The equal forms of `node` this side keeps: a slice moved down and a dot over a
    concatenation taken piece by piece (in the distributed graph only where they pick a
    piece or a part), and in the baseline a view moved through a dot either way."""
    forms = []
    if cut is not None:
        mover.begin()
        forms.append(mover.kept(mover.slice(node.operands[0], *cut, like=node), baseline))
    if pieces is not None:
        mover.begin()
        forms.append(mover.kept(mover.dot_of_pieces(node, *pieces), baseline))
    if baseline and node.op == "dot":
        mover.begin()
        forms.append(mover.kept(mover.view_out_of_dot(node), True))
    if baseline and node.op in ("merge", "split"):
        mover.begin()
        forms.append(mover.kept(mover.view_into_dot(node), True))
    return [f for f in forms if f is not None]


def _concatenated_contraction(node: Node, graph: Graph) -> tuple[int, int, int] | None:
    """(side, its contracting dim, the other side's) when one operand of a dot is a
    concatenation along a dim the dot contracts."""
    if node.op != "dot":
        return None
    a = node.attrs
    contracting = (tuple(a["lhs_contracting"]), tuple(a["rhs_contracting"]))
    for side in (0, 1):
        operand = graph.node(node.operands[side])
        if operand.op == "concatenate" and operand.attrs["dim"] in contracting[side]:
            k = contracting[side].index(operand.attrs["dim"])
            return side, contracting[side][k], contracting[1 - side][k]
    return None


def one_dim_cut(node: Node, graph: Graph) -> tuple[int, int, int] | None:
    """(dim, start, limit) when `node` is a stride-1 slice of exactly one dim."""
    if node.op != "slice":
        return None
    shape = graph.node(node.operands[0]).shape
    a = node.attrs
    cut = [
        (d, s, e)
        for d, (s, e, st) in enumerate(zip(a["starts"], a["limits"], a["strides"], strict=True))
        if (s, e, st) != (0, shape[d], 1)
    ]
    if len(cut) != 1 or a["strides"][cut[0][0]] != 1:
        return None
    return cut[0]


class _Mover:
    def __init__(self, graph: Graph, parts: dict[int, set[tuple[int, int, int]]]) -> None:
        self.graph = graph
        self.parts = parts
        self.next_id = max(graph.nodes, default=-1) + 1
        self.picked = False  # the last move picked a piece of a concatenation or a merge
        self.first = self.next_id  # where the form begun last starts

    def begin(self) -> None:
        """Start a form: the nodes from here on are its own, and nothing is picked yet."""
        self.first = self.next_id
        self.picked = False

    def kept(self, moved: int | None, always: bool) -> int | None:
        """The form begun last, kept when `always` or when it picked a piece or a part; its
        nodes are discarded otherwise."""
        if moved is None or not (always or self.picked):
            self.discard(self.first)
            return None
        return moved

    def discard(self, first: int) -> None:
        for i in range(first, self.next_id):
            self.graph.nodes.pop(i, None)
        self.next_id = first

    def slice(self, x: int, d: int, s: int, e: int, like: Node) -> int | None:
        """`x[..., s:e, ...]` (dim d) with the slice moved as far down as it goes: the new
        node's id, or None when it cannot move at all (the plain slice is the original)."""
        node = self.graph.node(x)
        if (s, e) == (0, node.shape[d]):
            return x
        moved = self._move(node, d, s, e, like)
        return moved

    def _plain(self, x: int, d: int, s: int, e: int, like: Node) -> int:
        if (d, s, e) in self.parts.get(x, ()):
            self.picked = True
        attrs, shape = dim_slice(self.graph.node(x).shape, d, s, e)
        return self._add(like, "slice", (x,), shape, attrs)

    def _deeper(self, x: int, d: int, s: int, e: int, like: Node) -> int:
        """The slice moved into x, or a plain slice of x where it stops."""
        moved = self.slice(x, d, s, e, like)
        return moved if moved is not None else self._plain(x, d, s, e, like)

    def _move(self, node: Node, d: int, s: int, e: int, like: Node) -> int | None:
        op, a = node.op, node.attrs
        shape = _cut(node.shape, d, e - s)
        if op == "dot":
            side, dim = _free_dim_source(node, d, self.graph)
            if side is None:
                return None
            operands = list(node.operands)
            operands[side] = self._deeper(operands[side], dim, s, e, like)
            return self._add(node, "dot", tuple(operands), shape, a)
        if op == "concatenate" and a["dim"] == d:
            offset = 0
            for piece in node.operands:
                size = self.graph.node(piece).shape[d]
                if offset <= s and e <= offset + size:
                    self.picked = True
                    return self._deeper(piece, d, s - offset, e - offset, like)
                offset += size
            return None
        if op == "merge":
            p, inner = a["dim"], a["inner"]
            if d != p:
                inner_d = d if d < p else d + 1
                below = self._deeper(node.operands[0], inner_d, s, e, like)
                return self._add(node, "merge", (below,), shape, a)
            if s % inner or e % inner:
                return None
            self.picked = True
            if e - s == inner:  # one row of the outer dim: pick it, the dims join
                return self._pick(node.operands[0], p, s // inner, like)
            below = self._deeper(node.operands[0], p, s // inner, e // inner, like)
            return self._add(node, "merge", (below,), shape, a)
        if op == "split":
            p, inner = a["dim"], a["inner"]
            if d == p + 1:
                return None  # a cut of the inner dim is no cut of the operand
            source = d if d < p else (p if d == p else d - 1)
            scale = inner if d == p else 1
            below = self._deeper(node.operands[0], source, s * scale, e * scale, like)
            return self._add(node, "split", (below,), shape, a)
        if op == "take":  # a cut of a table dim cuts the table (one expert's fused weight)
            index_rank = len(self.graph.node(node.operands[1]).shape)
            if d < index_rank:
                return None
            table_dim = d - index_rank + (d - index_rank >= a["dim"])
            below = self._deeper(node.operands[0], table_dim, s, e, like)
            return self._add(node, "take", (below, node.operands[1]), shape, a)
        if op in ELEMENTWISE or op == "broadcast":
            return self._into_operands(node, d, s, e, like)
        if op == "transpose":  # dim d of the result is dim perm[d] of the operand
            below = self._deeper(node.operands[0], a["perm"][d], s, e, like)
            return self._add(node, "transpose", (below,), shape, a)
        if op == "slice_at" and a["dim"] != d:
            below = self._deeper(node.operands[0], d, s, e, like)
            return self._add(node, "slice_at", (below, node.operands[1]), shape, a)
        return None

    def view_into_dot(self, view: Node) -> int | None:
        """`split`/`merge` of a dot's free dims as the dot of the viewed operand: the head
        split of `x @ Wq` equals `x @ Wq` viewed as (hidden, heads, head_dim), which is how
        code that projects straight into heads (Flax's DenseGeneral, an einsum) writes it."""
        node = self.graph.node(view.operands[0])
        if node.op != "dot":
            return None
        p, inner = view.attrs["dim"], view.attrs["inner"]
        side, dim = _free_dim_source(node, p, self.graph)
        if side is None:
            return None
        operand = self.graph.node(node.operands[side])
        if view.op == "merge":
            other, next_dim = _free_dim_source(node, p + 1, self.graph)
            if other != side or next_dim != dim + 1:
                return None  # the merged dims must be neighbours in one operand
            shape = operand.shape[:dim] + (operand.shape[dim] * inner,) + operand.shape[dim + 2 :]
            shift = -1
        else:
            outer = operand.shape[dim] // inner
            shape = operand.shape[:dim] + (outer, inner) + operand.shape[dim + 1 :]
            shift = 1
        viewed = self._add(view, view.op, (operand.id,), shape, {"dim": dim, "inner": inner})
        keys = ("lhs_batch", "lhs_contracting") if side == 0 else ("rhs_batch", "rhs_contracting")
        attrs = dict(node.attrs)
        for key in keys:
            attrs[key] = tuple(d + shift if d > dim else d for d in attrs.get(key, ()))
        operands = list(node.operands)
        operands[side] = viewed
        return self._add(node, "dot", tuple(operands), view.shape, attrs)

    def view_out_of_dot(self, node: Node) -> int | None:
        """A dot of an operand viewed along its free dims (split or merged) as that view of
        the dot of the operand itself: the other direction of `view_into_dot`, so that heads
        projected from a viewed weight also meet a matmul that is reshaped afterwards."""
        for side in (0, 1):
            view = self.graph.node(node.operands[side])
            if view.op not in ("merge", "split"):
                continue
            e, inner = view.attrs["dim"], view.attrs["inner"]
            keys = (
                ("lhs_batch", "lhs_contracting") if side == 0 else ("rhs_batch", "rhs_contracting")
            )
            fixed = {d for key in keys for d in node.attrs.get(key, ())}
            touched = {e, e + 1}
            if fixed & touched:
                continue  # the view reshapes a batch or contracted dim
            shift = 1 if view.op == "merge" else -1  # operand dims after e in the unviewed one
            attrs = dict(node.attrs)
            for key in keys:
                attrs[key] = tuple(d + shift if d > e else d for d in attrs.get(key, ()))
            operands = list(node.operands)
            operands[side] = view.operands[0]
            probe = Node(-1, "dot", tuple(operands), (), node.dtype, attrs)
            p = _output_position(probe, side, e, self.graph)
            source = self.graph.node(view.operands[0])
            if view.op == "split":
                shape = node.shape[:p] + (node.shape[p] * node.shape[p + 1],) + node.shape[p + 2 :]
                outer_op, outer_attrs = "split", {"dim": p, "inner": inner}
            else:
                shape = node.shape[:p] + source.shape[e : e + 2] + node.shape[p + 1 :]
                outer_op, outer_attrs = "merge", {"dim": p, "inner": source.shape[e + 1]}
            inner_dot = self._add(node, "dot", tuple(operands), shape, attrs)
            return self._add(node, outer_op, (inner_dot,), node.shape, outer_attrs)
        return None

    def _pick(self, y: int, p: int, index: int, like: Node) -> int | None:
        """`y` at entry `index` of dim p, with that dim gone (dim p+1 becomes dim p): what a
        one-row slice of `merge(y)` at dim p equals."""
        node = self.graph.node(y)
        a = node.attrs
        shape = node.shape[:p] + node.shape[p + 1 :]
        if node.op == "split" and a["dim"] == p:
            inner = a["inner"]
            return self._deeper(node.operands[0], p, index * inner, (index + 1) * inner, like)
        if node.op == "slice_at" and a["dim"] != p:
            below = self._pick(node.operands[0], p, index, like)
            if below is None:
                return None
            dim = a["dim"] - 1 if a["dim"] > p else a["dim"]
            return self._add(node, "slice_at", (below, node.operands[1]), shape, {**a, "dim": dim})
        return None

    def _into_operands(self, node: Node, d: int, s: int, e: int, like: Node) -> int | None:
        """A slice of an elementwise op (or a broadcast) as the op of its operands' slices,
        only where that reaches a piece of a concatenation or a part (a gradient
        `one_hot * concat(dg, du)^T`): anywhere else it would copy the computation for
        nothing."""
        first, before = self.next_id, self.picked
        self.picked = False
        shape = _cut(node.shape, d, e - s)
        if node.op == "broadcast":
            dims = tuple(node.attrs["dims"])
            if d not in dims:
                self.picked = before
                return None
            below = self._deeper(node.operands[0], dims.index(d), s, e, like)
            moved = self._add(node, "broadcast", (below,), shape, node.attrs)
        else:
            spread = [self._along_new_dim(o, d, shape) for o in node.operands]
            if sum(o is None for o in spread) != 1:
                self.discard(first)  # only one operand is cut (no other input gains a cut)
                self.picked = before
                return None
            operands = tuple(
                o if o is not None else self._deeper(node.operands[k], d, s, e, like)
                for k, o in enumerate(spread)
            )
            moved = self._add(node, node.op, operands, shape, node.attrs)
        if not self.picked:
            self.discard(first)
            self.picked = before
            return None
        return moved

    def _along_new_dim(self, operand: int, d: int, shape: tuple[int, ...]) -> int | None:
        """A broadcast whose dim d is a new one, at the cut shape (its operand uncut)."""
        node = self.graph.node(operand)
        if node.op != "broadcast" or d in tuple(node.attrs["dims"]):
            return None
        return self._add(node, "broadcast", node.operands, shape, node.attrs)

    def dot_of_pieces(self, node: Node, side: int, dim: int, other_dim: int) -> int:
        """`concat(a1, a2) . w` over the concatenated dim as `a1 . w[part 1] + a2 . w[part
        2]`: the gradient of a fused `[gate | up]` product reaching the fused weight, which
        relates to its baseline part by part."""
        concat = self.graph.node(node.operands[side])
        other = node.operands[1 - side]
        terms, offset = [], 0
        for piece in concat.operands:
            size = self.graph.node(piece).shape[dim]
            cut = self._deeper(other, other_dim, offset, offset + size, node)
            operands = (piece, cut) if side == 0 else (cut, piece)
            terms.append(self._add(node, "dot", operands, node.shape, node.attrs))
            offset += size
        total = terms[0]
        for term in terms[1:]:
            total = self._add(node, "add", (total, term), node.shape, {})
        return total

    def _add(self, like: Node, op: str, operands: tuple[int, ...], shape, attrs: dict) -> int:
        node_id = self.next_id
        self.next_id += 1
        name = f"{like.name}.sliced"
        self.graph.nodes[node_id] = like.derived(node_id, op, operands, shape, attrs, name)
        return node_id


def _cut(shape: tuple[int, ...], d: int, size: int) -> tuple[int, ...]:
    return shape[:d] + (size,) + shape[d + 1 :]


def _output_position(node: Node, side: int, dim: int, graph: Graph) -> int:
    """Where free dim `dim` of operand `side` lands in a dot's result."""
    for d in range(_dot_rank(node, graph)):
        if _free_dim_source(node, d, graph) == (side, dim):
            return d
    raise ValueError("not a free dim")


def _dot_rank(node: Node, graph: Graph) -> int:
    a = node.attrs
    ranks = [len(graph.node(o).shape) for o in node.operands]
    batch = len(a.get("lhs_batch", ()))
    contracted = len(a.get("lhs_contracting", ()))
    return batch + (ranks[0] - batch - contracted) + (ranks[1] - batch - contracted)


def _free_dim_source(node: Node, d: int, graph: Graph) -> tuple[int | None, int]:
    """(operand, dim) of a dot's output dim d when it is a free dim of one operand."""
    a = node.attrs
    lb, rb = tuple(a.get("lhs_batch", ())), tuple(a.get("rhs_batch", ()))
    lc, rc = tuple(a.get("lhs_contracting", ())), tuple(a.get("rhs_contracting", ()))
    lhs_rank, rhs_rank = (len(graph.node(o).shape) for o in node.operands)
    lhs_free = [i for i in range(lhs_rank) if i not in lb and i not in lc]
    rhs_free = [i for i in range(rhs_rank) if i not in rb and i not in rc]
    if d < len(lb):
        return None, -1
    if d < len(lb) + len(lhs_free):
        return 0, lhs_free[d - len(lb)]
    return 1, rhs_free[d - len(lb) - len(lhs_free)]
