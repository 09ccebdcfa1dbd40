"""Values each device assembles from windows of a value held block by block: XLA's resharding
of a slice whose offsets do not fall on the blocks' edges.

A fused product split over tp as one block (Phi-3's `[q | k | v]` columns, 128 of 256 per
device) is cut by the program at the parts' edges. XLA's partitioner gives each device its
block of each part by cutting windows out of its own block, handing some to a neighbour with
a collective-permute, and picking per device with a select on the device's id (or a concat
and a dynamic slice at an offset computed from it).

This pass reads, on every device, which window of which device's copy of one source value
each node of such a chain holds: slices, concatenations, collective-permutes, selects whose
predicate depends on the device alone, and dynamic slices at offsets that do, all along one
dim. Where every device ends with one window of the node's width w, taken from a device that
differs from it only along one mesh axis a, at the global offset `start + w * coord(a)` of
the source's blocks laid end to end along a, the node equals

    slice_at(slice(all_gather(source, d, a), start, start + w * n), w * coord(a))

on every device, by that evaluation alone (whatever the source is). The equal form is added
to the graph; the rules then relate it to the baseline as any device block of a gathered
value, where the source is itself a block of a baseline value.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from scalify.externs.device_tables import DeviceScalars
from scalify.ir import Graph, Node, dim_slice, place_after
from scalify.mesh import Mesh
from scalify.ops.collectives import permute_senders
from scalify.ops.coordinate_form import device_coordinate
from scalify.ops.structural import one_dim_pad

# the ops a window chain is made of (the first one met that is none of these is its source)
CHAIN = frozenset(
    {"slice", "concatenate", "collective_permute", "select", "slice_at", "dynamic_slice", "pad"}
)
# ops that make a window depend on the device: without one, the rules read the chain
MOVING = frozenset({"collective_permute", "select", "slice_at", "dynamic_slice"})


@dataclass(frozen=True)
class Piece:
    """Entries [lo, hi) along the chain's dim of the source as `device` holds it (None: zeros,
    what a collective-permute leaves on a device it sends nothing to)."""

    device: int | None
    lo: int
    hi: int


@dataclass(frozen=True)
class Windows:
    """What a node holds on each device: pieces of one source along one dim, in order."""

    source: int
    dim: int
    pieces: tuple[tuple[Piece, ...], ...]


def with_window_forms(graph: Graph, mesh: Mesh) -> Graph:
    """A copy of `graph` with the equal form above beside each node it holds for. Only a
    module that names its device count, and names the mesh's, is evaluated per device: a
    permute's pairs and a device's id mean what they say only there."""
    if mesh.size < 2 or graph.num_partitions != mesh.size:
        return graph
    if not any(n.op in MOVING for n in graph.nodes.values()):
        return graph
    reader = _WindowReader(graph, mesh)
    copy = replace(graph, nodes=dict(graph.nodes), equalities=list(graph.equalities))
    next_id = max(graph.nodes, default=-1) + 1
    placed: dict[int, list[int]] = {}
    for node in graph.nodes.values():
        if node.op not in MOVING:
            continue
        found = _block_of_gathered(reader.of(node.id), node, graph, mesh)
        if found is None:
            continue
        ids = _form(copy, node, found, mesh, next_id)
        next_id = ids[-1] + 1
        copy.equalities.append((node.id, ids[-1]))
        placed[node.id] = ids
    place_after(copy, placed)
    return copy


class _WindowReader:
    """The windows each node of a chain holds on every device, memoised."""

    def __init__(self, graph: Graph, mesh: Mesh) -> None:
        self.graph = graph
        self.mesh = mesh
        self.scalars = DeviceScalars(graph, mesh.size)
        self.memo: dict[tuple[int, int | None], Windows | None] = {}

    def of(self, node_id: int, dim: int | None = None) -> Windows | None:
        """The node's windows; a node outside any chain is its own source, whole along
        `dim` (which the op reading it decides). Ops that move whole values (a permute, a
        select) hold windows along the dim their reader asks for."""
        node = self.graph.node(node_id)
        if node.op not in CHAIN:
            if dim is None:
                return None
            size = node.shape[dim]
            whole = tuple((Piece(device, 0, size),) for device in range(self.mesh.size))
            return Windows(node_id, dim, whole)
        if (node_id, dim) not in self.memo:
            self.memo[node_id, dim] = getattr(self, f"_{node.op}")(node, dim)
        found = self.memo[node_id, dim]
        return found if found is None or dim in (None, found.dim) else None

    def _slice(self, node: Node, _: int | None) -> Windows | None:
        a = node.attrs
        operand = self.graph.node(node.operands[0])
        if any(s != 1 for s in a["strides"]):
            return None
        cut = [
            k
            for k, (lo, hi) in enumerate(zip(a["starts"], a["limits"], strict=True))
            if (lo, hi) != (0, operand.shape[k])
        ]
        if len(cut) != 1:
            return None
        (dim,) = cut
        held = self.of(operand.id, dim)
        if held is None:
            return None
        lo, hi = a["starts"][dim], a["limits"][dim]
        return _cut_all(held, [lo] * self.mesh.size, hi - lo)

    def _concatenate(self, node: Node, _: int | None) -> Windows | None:
        dim = node.attrs["dim"]
        parts = [self.of(o, dim) for o in node.operands]
        if any(p is None for p in parts) or len({p.source for p in parts}) != 1:
            return None
        pieces = tuple(
            tuple(piece for part in parts for piece in part.pieces[device])
            for device in range(self.mesh.size)
        )
        return Windows(parts[0].source, dim, pieces)

    def _collective_permute(self, node: Node, dim: int | None) -> Windows | None:
        held = self.of(node.operands[0], dim)
        if held is None:
            return None
        sender = permute_senders(node)
        width = node.shape[held.dim]
        pieces = tuple(
            held.pieces[sender[device]] if device in sender else (Piece(None, 0, width),)
            for device in range(self.mesh.size)
        )
        return Windows(held.source, held.dim, pieces)

    def _pad(self, node: Node, _: int | None) -> Windows | None:
        """A pad along one dim (no interior padding, no crop): the padding is no entry of
        the source (a piece of no device), so a window that keeps any of it is no block.
        XLA pads a window it handed on back to the width it selects among (Phi-3 at tp 4)."""
        found = one_dim_pad(node)
        if found is None:
            return None
        dim, low, high = found
        held = self.of(node.operands[0], dim)
        if held is None:
            return None
        pieces = tuple(
            ((Piece(None, 0, low),) if low else ())
            + mine
            + ((Piece(None, 0, high),) if high else ())
            for mine in held.pieces
        )
        return Windows(held.source, dim, pieces)

    def _select(self, node: Node, dim: int | None) -> Windows | None:
        predicate = self.scalars.spread(node.operands[0])
        if dim is None:  # the dim of whichever operand decides its own
            dim = next((w.dim for o in node.operands[1:] if (w := self.of(o)) is not None), None)
        on_true, on_false = (self.of(o, dim) for o in node.operands[1:])
        if predicate is None or on_true is None or on_false is None:
            return None
        if (on_true.source, on_true.dim) != (on_false.source, on_false.dim):
            return None
        pieces = tuple(
            (on_true if predicate[device] else on_false).pieces[device]
            for device in range(self.mesh.size)
        )
        return Windows(on_true.source, on_true.dim, pieces)

    def _slice_at(self, node: Node, _: int | None) -> Windows | None:
        dim, size = node.attrs["dim"], node.attrs["size"]
        held = self.of(node.operands[0], dim)
        offsets = self.scalars.of(node.operands[1])
        if held is None or offsets is None:
            return None
        length = self.graph.node(node.operands[0]).shape[dim]
        return _cut_clamped(held, offsets, length, size)

    def _dynamic_slice(self, node: Node, _: int | None) -> Windows | None:
        """A dynamic slice cut along one dim only (the others whole, from 0) whose width
        does not divide the dim, so canonicalisation left it a dynamic slice: DeepSeek's
        latent `[kv | rope]` product, 288 entries a device, cut back to 256."""
        x, *starts = node.operands
        operand = self.graph.node(x)
        sizes = node.attrs.get("sizes", node.shape)
        offsets = [self.scalars.of(s) for s in starts]
        if any(o is None for o in offsets):
            return None
        cut = [
            d
            for d, (size, offset) in enumerate(zip(sizes, offsets, strict=True))
            if size != operand.shape[d] or any(int(v) for v in offset)
        ]
        if len(cut) != 1:
            return None
        (dim,) = cut
        held = self.of(x, dim)
        if held is None:
            return None
        return _cut_clamped(held, offsets[dim], operand.shape[dim], sizes[dim])


def _cut_clamped(held: Windows, offsets: list, length: int, size: int) -> Windows | None:
    """Each device's window at its own offset, clamped into the dim as HLO clamps."""
    return _cut_all(held, [min(max(int(o), 0), length - size) for o in offsets], size)


def _cut_all(held: Windows, starts: list[int], size: int) -> Windows | None:
    """Entries [start, start + size) of what each device holds."""
    pieces = []
    for device, start in enumerate(starts):
        cut = _cut(held.pieces[device], start, start + size)
        if cut is None:
            return None
        pieces.append(cut)
    return Windows(held.source, held.dim, tuple(pieces))


def _cut(pieces: tuple[Piece, ...], lo: int, hi: int) -> tuple[Piece, ...] | None:
    out, at = [], 0
    for piece in pieces:
        length = piece.hi - piece.lo
        a, b = max(lo, at), min(hi, at + length)
        if a < b:
            out.append(Piece(piece.device, piece.lo + a - at, piece.lo + b - at))
        at += length
    return tuple(out) if sum(p.hi - p.lo for p in out) == hi - lo else None


@dataclass(frozen=True)
class Block:
    """What a node holds on every device: its block along `dim` over `axis` of the slice of
    `source`'s blocks, laid end to end along the axis, that starts at `start`."""

    source: Node
    dim: int
    axis: str
    start: int


def _block_of_gathered(held: Windows | None, node: Node, graph: Graph, mesh: Mesh) -> Block | None:
    """The block every device holds when it holds one window of the node's width
    at `start + width * coord(axis)` of the source's blocks laid end to end along the axis,
    taken from devices of its own group along that axis (the window may span the edge
    between two devices' blocks: pieces of both, in order); None otherwise."""
    if held is None or any(piece.device is None for p in held.pieces for piece in p):
        return None
    width = node.shape[held.dim]
    length = graph.node(held.source).shape[held.dim]
    for axis in (a for a in mesh.names if mesh.axis_size(a) > 1):
        n = mesh.axis_size(axis)
        starts = set()
        for device, pieces in enumerate(held.pieces):
            span = _span_along(pieces, device, axis, length, mesh)
            if span is None or span[1] - span[0] != width:
                break
            starts.add(span[0] - width * mesh.coords(device)[axis])
        else:
            if len(starts) == 1 and 0 <= min(starts) and min(starts) + width * n <= length * n:
                return Block(graph.node(held.source), held.dim, axis, min(starts))
    return None


def _span_along(
    pieces: tuple[Piece, ...], device: int, axis: str, length: int, mesh: Mesh
) -> tuple[int, int] | None:
    """[lo, hi) of the source's blocks laid end to end along `axis` that the pieces cover
    in order, each from a device of `device`'s group along the axis; None when they do not
    abut or come from elsewhere."""
    mine = mesh.coords(device)
    span = None
    for piece in pieces:
        theirs = mesh.coords(piece.device)
        if any(theirs[b] != mine[b] for b in mesh.names if b != axis):
            return None
        lo = length * theirs[axis] + piece.lo
        if span is not None and span[1] != lo:
            return None
        span = (span[0] if span else lo, lo + piece.hi - piece.lo)
    return span


def _form(graph: Graph, node: Node, block: Block, mesh: Mesh, next_id: int) -> list[int]:
    """slice_at(slice(all_gather(source, d, a), start, start + w n), w * coord(a)): its new
    nodes in order, the form last."""
    source, dim, axis, start = block.source, block.dim, block.axis, block.start
    n, width = mesh.axis_size(axis), node.shape[dim]
    stride = mesh.stride(axis)
    made: list[Node] = []

    def add(op: str, operands: tuple[int, ...], shape, dtype: str, attrs: dict) -> int:
        name = f"{node.name}.window_{op}"
        new = node.derived(next_id + len(made), op, operands, shape, attrs, name, dtype)
        made.append(new)
        graph.nodes[new.id] = new
        return new.id

    gathered_shape = list(source.shape)
    gathered_shape[dim] *= n
    gathered = add(
        "all_gather",
        (source.id,),
        gathered_shape,
        source.dtype,
        {"groups": mesh.groups((axis,)), "dim": dim},
    )
    attrs, piece_shape = dim_slice(tuple(gathered_shape), dim, start, start + width * n)
    piece = add("slice", (gathered,), piece_shape, source.dtype, attrs)
    coord = device_coordinate(add, n, stride, "s32")
    step = add("constant", (), (), "s32", {"value": str(width)})
    offset = add("mul", (coord, step), (), "s32", {})
    add(
        "slice_at",
        (piece, offset),
        node.shape,
        node.dtype,
        {"dim": dim, "size": width, "parts": n},
    )
    return [m.id for m in made]
