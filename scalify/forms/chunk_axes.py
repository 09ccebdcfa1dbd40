"""A dim of independent chunks is a mesh axis (split-KV attention on one device, chunked sums).

A program that views a dim of n as (c, n/c) and works on each of the c chunks alone until it
reduces across them computes what c devices would, each holding one chunk: the chunk dim is
a mesh axis laid out in memory. `lift_chunk_axis` rewrites such a graph as that SPMD program
over one more mesh axis: the view becomes each device's block of the dim (a `slice_at` at
its coordinate), an op along the chunk dim the same op on one chunk, and a reduction across
chunks an all-reduce over the new axis. The proof then uses the rules written for devices
(`rules/flash_decoding.srl`'s rescaled layouts, all-reduces of partials) for chunks as well,
and its cost does not grow with the number of chunks: no chunk is expanded.

The rewrite is exact, so a proof of the lifted graph is a proof of the original one. It
applies only when every value that carries the chunk dim is used by ops that act on each
chunk alone (elementwise ops, broadcasts, views and slices of other dims, dots that keep or
contract it) and every output is free of it; otherwise nothing is lifted.
"""

from __future__ import annotations

from dataclasses import dataclass

from scalify.canon.canonicalize import is_identity
from scalify.ir import Graph, Node
from scalify.mesh import Mesh
from scalify.ops import ELEMENTWISE

CHUNK_AXIS = "chunk"


class _NotLiftable(Exception):
    """A value carrying the chunk dim reaches an op that mixes chunks."""


@dataclass
class Lifted:
    """The graph as an SPMD program over `mesh` (the original axes, then the chunk axis)."""

    graph: Graph
    mesh: Mesh

    @property
    def chunks(self) -> int:
        return self.mesh.axis_size(CHUNK_AXIS)


def lift_chunk_axis(graph: Graph, mesh: Mesh) -> Lifted | None:
    """The graph with its chunk dim lifted to a mesh axis, or None when it has none.

    Seeds are the views that split a dim into (chunks, rest); of those with the same number
    of chunks, all are lifted together (the key and value caches are chunked alike). Only
    graphs that reduce across the chunks somewhere qualify: a view that is merely regrouped
    (heads out of a hidden dim) is not a chunking."""
    sizes = sorted({_chunk_count(n) for n in graph.nodes.values() if _chunk_count(n) > 1})
    for chunks in sizes:
        try:
            lifted = _Lifter(graph, mesh, chunks).run()
        except (_NotLiftable, KeyError, ValueError):  # an op's form this pass does not know
            continue
        if lifted is not None:
            return lifted
    return None


def _chunk_count(node: Node) -> int:
    if node.op != "split":
        return 0
    dim = node.attrs["dim"]
    return node.shape[dim] if node.shape[dim + 1] > 1 else 0


def _without(seq, index: int) -> tuple:
    return tuple(seq[:index]) + tuple(seq[index + 1 :])


def _shift(dims, removed: int) -> tuple[int, ...]:
    """Dim numbers once dim `removed` is gone (it must not be among them)."""
    return tuple(d - (d > removed) for d in dims)


class _Lifter:
    def __init__(self, graph: Graph, mesh: Mesh, chunks: int) -> None:
        self.graph = graph
        self.chunks = chunks
        self.mesh = Mesh(mesh.axes + ((CHUNK_AXIS, chunks),))
        self.chunk_dim: dict[int, int] = {}  # node id -> where its chunk dim is
        self.nodes: dict[int, Node] = {}
        self.next_id = max(graph.nodes, default=-1) + 1
        self.coordinate: int | None = None
        self.alias: dict[int, int] = {}  # nodes that became the identity: their operand
        self.reduced_across = False

    def run(self) -> Lifted | None:
        for node in self.graph.nodes.values():
            self._lift(node)
        if not self.reduced_across or any(o in self.chunk_dim for o in self.graph.outputs):
            return None
        lifted = Graph(
            path=self.graph.path,
            nodes=self.nodes,
            inputs=list(self.graph.inputs),
            outputs=[self.alias.get(o, o) for o in self.graph.outputs],
            input_shardings=dict(self.graph.input_shardings),
            output_shardings=dict(self.graph.output_shardings),
            mesh_hint={**self.graph.mesh_hint, CHUNK_AXIS: self.chunks}
            if self.graph.mesh_hint
            else {},
            num_partitions=self.mesh.size,
            equalities=[
                (self.alias.get(a, a), self.alias.get(b, b))
                for a, b in self.graph.equalities
                if self.chunk_dim.get(a) == self.chunk_dim.get(b)
            ],
        )
        return Lifted(lifted, self.mesh)

    # ---- building ------------------------------------------------------------------------

    def _emit(self, like: Node, op: str, operands, shape, attrs, node_id: int | None = None) -> int:
        if node_id is None:
            node_id, self.next_id = self.next_id, self.next_id + 1
            name = f"{like.name}.{op}"
        else:
            name = like.name
        operands = tuple(self.alias.get(o, o) for o in operands)
        fop = like.framework_op if node_id == like.id else op
        node = Node(node_id, op, operands, tuple(shape), like.dtype, attrs, like.loc, name, fop)
        if op in ("broadcast", "transpose") and is_identity(node, self.nodes[operands[0]]):
            # removing the chunk dim can leave nothing of an op that only placed that dim
            self.alias[node_id] = operands[0]
            return operands[0]
        self.nodes[node_id] = node
        return node_id

    def _scalar(self, value: int) -> int:
        node_id, self.next_id = self.next_id, self.next_id + 1
        self.nodes[node_id] = Node(node_id, "constant", (), (), "s32", {"value": str(value)})
        return node_id

    def _coordinate(self) -> int:
        """This device's chunk: (partition id / 1) % chunks, the chunk axis being the last."""
        if self.coordinate is None:
            rank = self.next_id
            self.next_id += 1
            self.nodes[rank] = Node(rank, "rank_index", (), (), "s32", {"kind": "partition"})
            one, count = self._scalar(1), self._scalar(self.chunks)
            div = self._int_op("div", (rank, one))
            self.coordinate = self._int_op("rem", (div, count))
        return self.coordinate

    def _int_op(self, op: str, operands: tuple[int, int]) -> int:
        node_id, self.next_id = self.next_id, self.next_id + 1
        self.nodes[node_id] = Node(node_id, op, operands, (), "s32", {})
        return node_id

    def _groups(self, groups: tuple) -> tuple:
        """Replica groups of the original devices, repeated for every chunk (device d of the
        original mesh is device d * chunks + c here)."""
        old = groups or (tuple(range(Mesh(self.mesh.axes[:-1]).size)),)
        return tuple(tuple(d * self.chunks + c for d in g) for c in range(self.chunks) for g in old)

    # ---- lifting each op ------------------------------------------------------------------

    def _lift(self, node: Node) -> None:
        carried = [self.chunk_dim.get(o) for o in node.operands]
        if _chunk_count(node) == self.chunks and carried == [None]:
            return self._seed(node)
        if node.op == "rank_index" and node.attrs.get("kind") == "partition":
            return self._original_rank(node)
        if all(c is None for c in carried):
            attrs = dict(node.attrs)
            if node.op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all"):
                attrs["groups"] = self._groups(attrs.get("groups", ()))
            elif node.op == "collective_permute":
                raise _NotLiftable(node.op)  # pairs would need remapping; no such program yet
            self._emit(node, node.op, node.operands, node.shape, attrs, node.id)
            return None
        handler = getattr(self, f"_op_{node.op}", None)
        if node.op in ELEMENTWISE:
            handler = self._elementwise
        if handler is None:
            raise _NotLiftable(node.op)
        handler(node, carried)
        return None

    def _original_rank(self, node: Node) -> None:
        """The original device id is the new one divided by the number of chunks."""
        rank = self._emit(node, "rank_index", (), (), dict(node.attrs))
        self._emit(node, "div", (rank, self._scalar(self.chunks)), (), {}, node.id)

    def _seed(self, node: Node) -> None:
        """x viewed as (chunks, rest) along dim p is, on the device of chunk r, x[r*rest:...]."""
        (x,) = node.operands
        p, rest = node.attrs["dim"], node.shape[node.attrs["dim"] + 1]
        start = self._int_op("mul", (self._coordinate(), self._scalar(rest)))
        shape = self.graph.node(x).shape
        block = shape[:p] + (rest,) + shape[p + 1 :]
        attrs = {"dim": p, "size": rest, "parts": self.chunks}
        self._emit(node, "slice_at", (x, start), block, attrs, node.id)
        self.chunk_dim[node.id] = p

    def _carry(self, node: Node, dim: int, op: str, operands, attrs) -> None:
        self._emit(node, op, operands, _without(node.shape, dim), attrs, node.id)
        self.chunk_dim[node.id] = dim

    def _chunk_free(self, operand: int, dim: int, like: Node) -> int:
        """An operand without the chunk dim, as the device of one chunk sees it: a broadcast
        that creates `dim` is the same for every chunk (the broadcast without it); any other
        value is cut, and the device takes its own entry of `dim` (a slice at its coordinate,
        the unit dim then merged away), located where the value was made."""
        node = self.graph.node(operand)
        if node.op == "broadcast" and dim not in node.attrs["dims"]:
            dims = _shift(node.attrs["dims"], dim)
            shape = _without(node.shape, dim)
            return self._emit(like, "broadcast", node.operands, shape, {**node.attrs, "dims": dims})
        if node.shape[dim] != self.chunks:
            raise _NotLiftable(f"{node.op} meets chunks along a dim of {node.shape[dim]}")
        one = node.shape[:dim] + (1,) + node.shape[dim + 1 :]
        attrs = {"dim": dim, "size": 1, "parts": self.chunks}
        mine = self._emit(node, "slice_at", (operand, self._coordinate()), one, attrs)
        if len(one) == 1:
            return self._emit(node, "reshape", (mine,), (), {})
        at = dim if dim + 1 < len(one) else dim - 1
        merge = {"dim": at, "inner": one[at + 1]}
        return self._emit(node, "merge", (mine,), _without(node.shape, dim), merge)

    def _elementwise(self, node: Node, carried: list[int | None]) -> None:
        dims = {c for c in carried if c is not None}
        if len(dims) != 1:
            raise _NotLiftable("operands chunked along different dims")
        (dim,) = dims
        operands = [
            o if c is not None else self._chunk_free(o, dim, node)
            for o, c in zip(node.operands, carried, strict=True)
        ]
        self._carry(node, dim, node.op, operands, dict(node.attrs))

    def _op_broadcast(self, node: Node, carried) -> None:
        (dim,) = carried
        out = node.attrs["dims"][dim]
        dims = _shift(_without(node.attrs["dims"], dim), out)
        self._carry(node, out, "broadcast", node.operands, {**node.attrs, "dims": dims})

    def _op_transpose(self, node: Node, carried) -> None:
        (dim,) = carried
        perm = node.attrs["perm"]
        out = perm.index(dim)
        self._carry(
            node, out, "transpose", node.operands, {"perm": _shift(_without(perm, out), dim)}
        )

    def _op_split(self, node: Node, carried) -> None:
        (dim,) = carried
        p = node.attrs["dim"]
        if p == dim:
            raise _NotLiftable("the chunk dim is split further")
        attrs = {**node.attrs, "dim": p - (p > dim)}
        self._carry(node, dim + (dim > p), "split", node.operands, attrs)

    def _op_merge(self, node: Node, carried) -> None:
        (dim,) = carried
        p = node.attrs["dim"]
        if dim in (p, p + 1):
            raise _NotLiftable("the chunk dim is merged")
        attrs = {**node.attrs, "dim": p - (p > dim)}
        self._carry(node, dim - (dim > p), "merge", node.operands, attrs)

    def _op_slice(self, node: Node, carried) -> None:
        (dim,) = carried
        a = node.attrs
        if (a["starts"][dim], a["limits"][dim]) != (0, node.shape[dim]) or a["strides"][dim] != 1:
            raise _NotLiftable("a slice across chunks")
        attrs = {k: _without(a[k], dim) for k in ("starts", "limits", "strides")}
        self._carry(node, dim, "slice", node.operands, attrs)

    def _op_slice_at(self, node: Node, carried) -> None:
        dim = carried[0]
        if dim is None or carried[1] is not None or node.attrs["dim"] == dim:
            raise _NotLiftable("a slice across chunks")
        attrs = {**node.attrs, "dim": node.attrs["dim"] - (node.attrs["dim"] > dim)}
        self._carry(node, dim, "slice_at", node.operands, attrs)

    def _op_concatenate(self, node: Node, carried) -> None:
        dims = {c for c in carried if c is not None}
        if len(dims) != 1 or node.attrs["dim"] in dims:
            raise _NotLiftable("a concatenation across chunks")
        (dim,) = dims
        operands = [
            o if c is not None else self._chunk_free(o, dim, node)
            for o, c in zip(node.operands, carried, strict=True)
        ]
        attrs = {**node.attrs, "dim": node.attrs["dim"] - (node.attrs["dim"] > dim)}
        self._carry(node, dim, "concatenate", operands, attrs)

    def _op_reduce(self, node: Node, carried) -> None:
        if len(carried) != 1:
            raise _NotLiftable("a reduction with an initial value")
        (dim,) = carried
        dims = tuple(node.attrs["dims"])
        if dim not in dims:
            kept = dim - sum(d < dim for d in dims)
            self._carry(
                node, kept, "reduce", node.operands, {**node.attrs, "dims": _shift(dims, dim)}
            )
            return
        rest = _shift(tuple(d for d in dims if d != dim), dim)
        operand = node.operands[0]
        if rest:
            operand = self._emit(
                node, "reduce", node.operands, node.shape, {**node.attrs, "dims": rest}
            )
        self._across(node, operand, node.attrs["op"])

    def _across(self, node: Node, operand: int, op: str) -> None:
        """The combination of every chunk's value: an all-reduce over the chunk axis."""
        groups = self.mesh.groups((CHUNK_AXIS,))
        self._emit(
            node, "all_reduce", (operand,), node.shape, {"groups": groups, "op": op}, node.id
        )
        self.reduced_across = True

    def _op_dot(self, node: Node, carried) -> None:
        lhs, rhs = carried
        a = node.attrs
        lb, rb = tuple(a["lhs_batch"]), tuple(a["rhs_batch"])
        lc, rc = tuple(a["lhs_contracting"]), tuple(a["rhs_contracting"])
        x, y = node.operands
        lhs_rank, rhs_rank = len(self.graph.node(x).shape), len(self.graph.node(y).shape)
        lhs_free = [d for d in range(lhs_rank) if d not in lb + lc]
        rhs_free = [d for d in range(rhs_rank) if d not in rb + rc]

        def attrs(drop_l: int | None, drop_r: int | None) -> dict:
            def fix(dims, drop):
                return dims if drop is None else _shift(dims, drop)

            new = dict(a)
            for key, drop, dims in (
                ("lhs_batch", drop_l, lb),
                ("lhs_contracting", drop_l, lc),
                ("rhs_batch", drop_r, rb),
                ("rhs_contracting", drop_r, rc),
            ):
                kept = tuple(d for d in dims if d != drop)
                new[key] = fix(kept, drop)
            return new

        if lhs is not None and rhs is None and lhs in lb + lc:
            paired = (rb + rc)[(lb + lc).index(lhs)]
            y, rhs = self._chunk_free(y, paired, self.graph.node(y)), paired
        elif rhs is not None and lhs is None and rhs in rb + rc:
            paired = (lb + lc)[(rb + rc).index(rhs)]
            x, lhs = self._chunk_free(x, paired, self.graph.node(x)), paired
        if lhs is not None and rhs is not None:
            if lhs in lb and rhs in rb and lb.index(lhs) == rb.index(rhs):
                return self._carry(node, lb.index(lhs), "dot", (x, y), attrs(lhs, rhs))
            if lhs in lc and rhs in rc and lc.index(lhs) == rc.index(rhs):
                local = self._emit(node, "dot", (x, y), node.shape, attrs(lhs, rhs))
                return self._across(node, local, "sum")
            raise _NotLiftable("a dot pairing the chunk dim with another dim")
        if lhs is not None and lhs in lhs_free:
            out = len(lb) + lhs_free.index(lhs)
            return self._carry(node, out, "dot", node.operands, attrs(lhs, None))
        if rhs is not None and rhs in rhs_free:
            out = len(lb) + len(lhs_free) + rhs_free.index(rhs)
            return self._carry(node, out, "dot", node.operands, attrs(None, rhs))
        raise _NotLiftable("a dot contracting chunks with an unchunked operand")
