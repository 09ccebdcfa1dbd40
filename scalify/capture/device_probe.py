"""Trace a DTensor program on more than one device and name what depends on the device.

`make_fx` records one rank's program, with every number the host computed from the rank
baked in: DTensor's vocab-parallel embedding compares token ids with `r * rows` and
`(r + 1) * rows`, a `Replicate -> Shard` redistribute keeps `chunk(x)[r]`. Read as rank 0's
numbers, every device would compare with `0` and keep chunk 0, which is not the program the
devices run (a correct model is then reported wrong, and a program that misbehaves only on
other ranks could be proved).

So the program is traced again as other devices (every live `DeviceMesh` told its coordinates
for that global rank): the device one step along each mesh axis, and the last device. The
graphs must be the same but for numbers; each number that differs must be affine in the
coordinates (`v0 + sum_k slope_k * coord_k`, checked at the last device), and it is replaced
by that expression over `scalify::device_coordinate` ops (device_ops.py). A difference in
structure, shapes or tensor constants, or a number Scalify cannot put a value in place of, is
a `ScalifyError` naming the op: never a silent guess.
"""

from __future__ import annotations

import gc
import math
import operator
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from scalify.capture import device_ops
from scalify.errors import ScalifyError

Probe = tuple[int, ...]  # a device's coordinates on the root mesh


def live_meshes() -> list[Any]:
    """Every `DeviceMesh` alive in this process over the current job (a plan's submeshes
    included)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh

    if not dist.is_initialized():
        return []
    world = dist.get_world_size()
    # the type's MRO, not isinstance: isinstance on every live object wakes deprecation hooks;
    # meshes of a larger job (an earlier fake process group) are stale
    return [
        o
        for o in gc.get_objects()
        if DeviceMesh in type(o).__mro__ and o.mesh.numel() <= world and _groups_alive(o)
    ]


def _groups_alive(mesh: Any) -> bool:
    """Whether the mesh's process groups belong to the process group now initialised: a
    mesh built under an earlier one (of the same size) is stale."""
    try:
        for dim in range(mesh.mesh.ndim):
            mesh.get_group(dim)
    except (RuntimeError, ValueError, KeyError, AttributeError):
        return False
    return True


def root_mesh(meshes: list[Any]) -> Any | None:
    """The mesh over every device, ranks in row-major order; None when there is none."""
    whole = [m for m in meshes if m.mesh.numel() == max(m.mesh.numel() for m in meshes)]
    root = max(whole, key=lambda m: m.mesh.ndim, default=None)
    if root is None or root.mesh.numel() < 2:
        return None
    if root.mesh.flatten().tolist() != list(range(root.mesh.numel())):
        raise ScalifyError(
            f"the device mesh {root.mesh.tolist()} does not number devices in row-major order; "
            "Scalify reads a mesh of global ranks 0..N-1 in order"
        )
    return root


def _coordinate_in(mesh: Any, rank: int, root: Any | None) -> tuple[int, ...] | None:
    """The device's coordinate on `mesh`: where the mesh holds it, else, for a sub-mesh of
    named dims of the root (this process built device 0's: its data-parallel peers, say),
    the device's root coordinates on those dims, its place in its own such sub-mesh."""
    found = (mesh.mesh == rank).nonzero()
    if len(found):
        return tuple(found[0].tolist())
    names = getattr(mesh, "mesh_dim_names", None)
    root_names = getattr(root, "mesh_dim_names", None) if root is not None else None
    if not names or not root_names or any(n not in root_names for n in names):
        return None
    at = (root.mesh == rank).nonzero()
    if not len(at):
        return None
    coords = at[0].tolist()
    return tuple(coords[root_names.index(n)] for n in names)


@contextmanager
def as_device(meshes: list[Any], rank: int) -> Iterator[None]:
    """This process is global rank `rank`: for every mesh in `meshes` (its coordinates), for
    `torch.distributed.get_rank` wherever a loaded module holds it, and for
    `ProcessGroup.rank()` (the rank in a group, as Megatron and torchtitan read it)."""
    import torch.distributed.distributed_c10d as c10d

    original = c10d.get_rank
    group_type = c10d.ProcessGroup
    original_group_rank = group_type.__dict__["rank"]

    def get_rank(group: Any = None) -> int:
        if group is None or group is c10d.GroupMember.WORLD:
            return rank
        try:
            return c10d.get_group_rank(group, rank)
        except ValueError:
            # The group this process built is device 0's along some mesh dim (its tensor-
            # parallel peers, say); the probed device's own group along that dim, which this
            # process never built, has the device at its coordinate on the dim.
            coordinate = along_groups.get(id(group), {}).get(rank)
            if coordinate is None:
                raise
            return coordinate

    def group_rank(group: Any) -> int:
        try:
            return get_rank(group)
        except (ValueError, RuntimeError):  # a group this device is not in
            return original_group_rank(group)

    holders = [
        m
        for m in list(sys.modules.values())
        if m is not None and getattr(m, "get_rank", None) is original
    ]
    saved = [m._coordinate_on_dim for m in meshes]
    along_groups = _coordinates_along_groups(meshes)  # read before tracing sees the meshes
    try:
        root = root_mesh(meshes) if meshes else None
        for m in meshes:
            m._coordinate_on_dim = _coordinate_in(m, rank, root)
        for module in holders:
            module.get_rank = get_rank
        group_type.rank = group_rank
        yield
    finally:
        group_type.rank = original_group_rank
        for m, coordinate in zip(meshes, saved, strict=True):
            m._coordinate_on_dim = coordinate
        for module in holders:
            module.get_rank = original


def _coordinates_along_groups(meshes: list[Any]) -> dict[int, dict[int, int]]:
    """For the process group of each mesh dim (device 0's peers along it, the group this
    process built), every global rank's coordinate on that dim: the rank a device has in its
    own group along the dim."""
    found: dict[int, dict[int, int]] = {}
    for mesh in meshes:
        ranks = mesh.mesh
        for dim in range(ranks.ndim):
            try:
                group = mesh.get_group(dim)
            except (RuntimeError, ValueError):  # a dim with no group of its own
                continue
            coordinates = {
                int(r): int(c[dim])
                for r, c in zip(ranks.flatten(), _all_coordinates(ranks), strict=True)
            }
            known = found.setdefault(id(group), {})  # a sub-mesh holds device 0's block only
            known.update({r: c for r, c in coordinates.items() if r not in known})
    return found


def _all_coordinates(ranks: Any) -> list[tuple[int, ...]]:
    """Row-major coordinates of every entry of a mesh's rank tensor."""
    import itertools

    return list(itertools.product(*(range(n) for n in ranks.shape)))


def _strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(math.prod(shape[k + 1 :]) for k in range(len(shape)))


def probe_ranks(shape: tuple[int, ...]) -> dict[int, Probe]:
    """Global rank -> coordinates: one step along each axis of more than one device, and the
    last device (which checks that what changed is affine)."""
    strides = _strides(shape)
    probes: dict[int, Probe] = {}
    for k, n in enumerate(shape):
        if n > 1:
            probes[strides[k]] = tuple(int(j == k) for j in range(len(shape)))
    last = math.prod(shape) - 1
    probes.setdefault(last, tuple(n - 1 for n in shape))
    return probes


def trace_on_devices(
    make: Callable[[], torch.fx.GraphModule], gm: torch.fx.GraphModule
) -> torch.fx.GraphModule:
    """`gm` (traced as rank 0 by `make`) with every number that depends on the device
    replaced by its expression over the device's coordinates."""
    meshes = live_meshes()
    root = root_mesh(meshes) if meshes else None
    if root is None:
        return gm
    return _with_device_numbers(gm, make, tuple(int(n) for n in root.mesh.shape), meshes)


def trace_per_device(
    make: Callable[[], torch.fx.GraphModule], shape: tuple[int, ...]
) -> torch.fx.GraphModule:
    """`make()` run as each probed device of a job of `shape` (row-major ranks), with every
    number that depends on the device replaced by its expression over the coordinates.

    For code that reads its rank when it is built rather than when it runs, with no
    DeviceMesh to tell (Megatron's `VocabParallelEmbedding` keeps its vocabulary range as
    numbers): `make` builds the module and traces it, and each device's build sees its own
    rank through `torch.distributed.get_rank`. The weights, its own per device, are inputs."""
    import torch.distributed as dist

    devices = math.prod(shape)
    world = dist.get_world_size() if dist.is_initialized() else None
    if world != devices:
        raise ScalifyError(
            f"trace_per_device over a job of shape {list(shape)} ({devices} devices) needs a "
            f"process group of {devices} ranks; "
            + (f"this one has {world}" if world else "none is initialised")
        )
    with as_device([], 0):
        gm = make()
    return _with_device_numbers(gm, make, shape, [])


def _with_device_numbers(
    gm: torch.fx.GraphModule,
    make: Callable[[], torch.fx.GraphModule],
    shape: tuple[int, ...],
    meshes: list[Any],
) -> torch.fx.GraphModule:
    """`gm` (device 0's trace) with the numbers that differ on the probed devices (`make()`
    traced as each) replaced by their expressions over the coordinates."""
    others: dict[Probe, torch.fx.GraphModule] = {}
    for rank, coords in probe_ranks(shape).items():
        with as_device(meshes, rank):
            others[coords] = make()
    differences = _differences(gm, others)
    if differences:
        _substitute(gm, differences, shape)
    return gm


# ---- comparing traces


class _Mismatch(Exception):
    pass


def _where(node: torch.fx.Node) -> str:
    from scalify.frontends.fx import source_loc

    loc = source_loc(node.meta.get("stack_trace"))
    return f" at {loc}" if loc else ""


def _differences(
    gm: torch.fx.GraphModule, others: dict[Probe, torch.fx.GraphModule]
) -> dict[tuple[int, tuple], dict[Probe, Any]]:
    """(node position, argument path) -> the number there on each probed device (rank 0's
    under the all-zero coordinates)."""
    nodes = list(gm.graph.nodes)
    found: dict[tuple[int, tuple], dict[Probe, Any]] = {}
    zero: Probe = tuple(0 for _ in next(iter(others)))
    for coords, other in others.items():
        theirs = list(other.graph.nodes)
        if len(theirs) != len(nodes):
            raise ScalifyError(
                f"the program traced as the device at {list(coords)} has {len(theirs)} ops "
                f"and as device 0 {len(nodes)}: its structure depends on the device, which "
                "Scalify does not verify (a branch on the rank, or shards of unequal size)"
            )
        index = {n: i for i, n in enumerate(nodes)}
        their_index = {n: i for i, n in enumerate(theirs)}
        for i, (mine, their) in enumerate(zip(nodes, theirs, strict=True)):
            try:
                picks: list[tuple[tuple, int, int]] = []
                _same_node(gm, other, mine, their, index, their_index, picks)
                for path, a, b in _number_pairs(mine.args, their.args, ()):
                    found.setdefault((i, path), {zero: a})[coords] = b
                for path, a, b in picks:
                    found.setdefault((i, (PIECE, *path)), {zero: a})[coords] = b
            except _Mismatch as exc:
                raise ScalifyError(
                    f"op `{mine.name}`{_where(mine)} differs between device 0 and the device "
                    f"at {list(coords)}: {exc}; Scalify verifies one program for every device"
                ) from None
    return {key: values for key, values in found.items() if len(set(values.values())) > 1}


# An argument path that starts here names an operand that is one piece of a split, and the
# number is which piece (a backward redistribute keeps the device's chunk of a gradient).
PIECE = "piece"


def _same_node(gm, other, mine, their, index, their_index, picks=None) -> None:
    if mine.op != their.op or mine.target != their.target:
        raise _Mismatch(f"{mine.target} against {their.target}")
    if mine.op == "get_attr":
        a, b = _attr(gm, mine.target), _attr(other, their.target)
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
            weights = isinstance(a, torch.nn.Parameter) and isinstance(b, torch.nn.Parameter)
            if a.shape != b.shape:
                raise _Mismatch("a tensor constant of another shape")
            if not weights and a.data_ptr() != b.data_ptr() and not torch.equal(a, b):
                raise _Mismatch("a tensor constant with other values")
    va, vb = mine.meta.get("val"), their.meta.get("val")
    if isinstance(va, torch.Tensor) and isinstance(vb, torch.Tensor):
        if tuple(va.shape) != tuple(vb.shape) or va.dtype != vb.dtype:
            raise _Mismatch(f"shape {list(va.shape)} against {list(vb.shape)}")
    _same_structure(mine.args, their.args, index, their_index, (), picks)
    _same_structure(mine.kwargs, their.kwargs, index, their_index)


def _attr(gm: torch.fx.GraphModule, target: str) -> Any:
    obj: Any = gm
    for part in str(target).split("."):
        obj = getattr(obj, part, None)
    return obj


def _piece(node: torch.fx.Node) -> tuple[torch.fx.Node, int] | None:
    """(split, k) for `split(...)[k]`, else None."""
    if node.target is operator.getitem and isinstance(node.args[0], torch.fx.Node):
        if isinstance(node.args[1], int):
            return node.args[0], node.args[1]
    return None


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _same_structure(a: Any, b: Any, index, their_index, path: tuple = (), picks=None) -> None:
    """Raise `_Mismatch` unless `a` and `b` are the same arguments up to numbers; an operand
    that is another piece of the same split on each device is recorded in `picks` as
    (argument path, piece on device 0, piece on the other device)."""
    if isinstance(a, torch.fx.Node) or isinstance(b, torch.fx.Node):
        if not (isinstance(a, torch.fx.Node) and isinstance(b, torch.fx.Node)):
            raise _Mismatch("an argument is a value on one device and a constant on another")
        if index[a] == their_index[b]:
            return
        mine, theirs = _piece(a), _piece(b)
        if picks is None or mine is None or theirs is None:
            raise _Mismatch("its operands differ")
        if index[mine[0]] != their_index[theirs[0]]:
            raise _Mismatch("its operands differ")
        picks.append((path, mine[1], theirs[1]))
        return
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            raise _Mismatch("argument lists of other lengths")
        for k, (x, y) in enumerate(zip(a, b, strict=True)):
            _same_structure(x, y, index, their_index, (*path, k), picks)
        return
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            raise _Mismatch("other keyword arguments")
        for key in a:
            _same_structure(a[key], b[key], index, their_index)
        return
    if _is_number(a) and _is_number(b):
        return
    if a != b:
        raise _Mismatch(f"argument {a!r} against {b!r}")


def _number_pairs(a: Any, b: Any, path: tuple) -> Iterator[tuple[tuple, Any, Any]]:
    if isinstance(a, (list, tuple)):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            yield from _number_pairs(x, y, path + (i,))
    elif _is_number(a) and a != b:
        yield path, a, b


# ---- substituting device expressions


def _affine(values: dict[Probe, Any], shape: tuple[int, ...]) -> tuple[Any, list[Any]]:
    """(v0, slope per axis) of a number seen at the probes; raises when it is not affine."""
    zero = tuple(0 for _ in shape)
    v0 = values[zero]
    slopes = []
    for k in range(len(shape)):
        step = tuple(int(j == k) for j in range(len(shape)))
        slopes.append(values[step] - v0 if step in values else 0)
    for coords, value in values.items():
        expected = v0 + sum(s * c for s, c in zip(slopes, coords, strict=True))
        if value != expected:
            raise ValueError(f"{value} at device {list(coords)}, not {expected}")
    return v0, slopes


def _substitute(
    gm: torch.fx.GraphModule,
    differences: dict[tuple[int, tuple], dict[Probe, Any]],
    shape: tuple[int, ...],
) -> None:
    nodes = list(gm.graph.nodes)
    strides = _strides(shape)
    graph = gm.graph
    coordinates: dict[int, torch.fx.Node] = {}
    for (i, path), values in sorted(differences.items(), key=lambda kv: (kv[0][0], str(kv[0]))):
        node = nodes[i]
        try:
            v0, slopes = _affine(values, shape)
        except ValueError as exc:
            raise ScalifyError(
                f"op `{node.name}`{_where(node)} takes a number that depends on the device "
                f"but not affinely on its coordinates ({exc})"
            ) from None
        for k, slope in enumerate(slopes):
            if slope and k not in coordinates:  # one per axis, before every use
                with graph.inserting_before(nodes[0]):
                    args = (shape[k], strides[k], 0)
                    coordinates[k] = graph.call_function(device_ops.device_coordinate, args)
                coordinates[k].meta["val"] = torch.tensor(0, dtype=torch.int64)
        with graph.inserting_before(node):
            value = _expression(graph, v0, slopes, coordinates)
        if path[:1] == (PIECE,):
            placed = _put_piece(node, path[1:], value)
        else:
            placed = _put(node, path, value)
        if not placed:
            raise ScalifyError(
                f"op `{node.name}`{_where(node)} ({node.target}) takes a number that depends "
                f"on the device (argument {list(path)}: {sorted(set(values.values()))}), "
                "where Scalify cannot read a per-device value"
            )
    graph.lint()
    gm.recompile()


def _expression(
    graph, v0: Any, slopes: list[Any], coordinates: dict[int, torch.fx.Node]
) -> torch.fx.Node:
    """v0 + sum_k slope_k * coordinate_k as FX nodes (0-d tensors)."""
    value = None
    for k, slope in enumerate(slopes):
        if not slope:
            continue
        term = coordinates[k]
        if slope != 1:
            term = _arith(graph, torch.ops.aten.mul.Tensor, term, slope)
        value = term if value is None else _arith(graph, torch.ops.aten.add.Tensor, value, term)
    if v0:
        value = _arith(graph, torch.ops.aten.add.Tensor, value, v0)
    return value


def _arith(graph, target, a: torch.fx.Node, b: Any) -> torch.fx.Node:
    node = graph.call_function(target, (a, b))
    other = b.meta["val"] if isinstance(b, torch.fx.Node) else b
    node.meta["val"] = target(a.meta["val"], other)
    return node


def _put(node: torch.fx.Node, path: tuple, value: torch.fx.Node) -> bool:
    """Put the device value at `path` of `node`'s arguments, where the op can take a tensor
    there: the scalar operand of an elementwise op (its `.Scalar` overload swapped for the
    `.Tensor` one), or the index of a chunk taken from a `split`/`chunk`."""
    if node.target is operator.getitem and path == (1,):
        return _chunk_at(node, value)
    if len(path) != 1 or path[0] not in (0, 1):
        return False
    target = node.target
    packet = getattr(target, "overloadpacket", None)
    schema = getattr(target, "_schema", None)
    if packet is None or schema is None:
        return False
    argument = schema.arguments[path[0]]
    if str(argument.type) in ("Scalar", "number"):
        overload = getattr(target, "_overloadname", "")
        swapped = overload.replace("Scalar", "Tensor")
        if swapped == overload or swapped not in packet.overloads():
            return False
        node.target = getattr(packet, swapped)
    elif str(argument.type) != "Tensor":
        return False
    args = list(node.args)
    args[path[0]] = value
    node.args = tuple(args)
    return True


def _put_piece(node: torch.fx.Node, path: tuple, index: torch.fx.Node) -> bool:
    """The operand at `path` of `node`, a piece of a split that depends on the device, read
    as `chunk_at(x, dim, pieces, index)` for this node (the split's other users keep it)."""
    args = list(node.args)
    if len(path) != 1 or not 0 <= path[0] < len(args):
        return False
    piece = args[path[0]]
    if not isinstance(piece, torch.fx.Node) or _piece(piece) is None:
        return False
    with node.graph.inserting_before(node):
        chunk = _chunk_node(piece, index)
    if chunk is None:
        return False
    args[path[0]] = chunk
    node.args = tuple(args)
    return True


def _chunk_at(node: torch.fx.Node, index: torch.fx.Node) -> bool:
    """`split(x, size, dim)[i]` (equal pieces) as `chunk_at(x, dim, pieces, i)`."""
    graph = node.graph
    with graph.inserting_before(node):
        chunk = _chunk_node(node, index)
    if chunk is None:
        return False
    node.replace_all_uses_with(chunk)
    graph.erase_node(node)
    return True


def _chunk_node(node: torch.fx.Node, index: torch.fx.Node) -> torch.fx.Node | None:
    """A `chunk_at` node for the piece `node` = `split(x, size, dim)[k]` (equal pieces) at a
    device-dependent `index`, at the graph's insertion point; None for other forms."""
    split = node.args[0]
    if not isinstance(split, torch.fx.Node) or split.op != "call_function":
        return None
    name = getattr(getattr(split.target, "overloadpacket", None), "__name__", "")
    pieces = split.meta.get("val")
    if name not in ("split", "chunk", "split_with_sizes") or not isinstance(pieces, (list, tuple)):
        return None
    x = split.args[0]
    dim = split.args[2] if len(split.args) > 2 else split.kwargs.get("dim", 0)
    dim = int(dim) % len(pieces[0].shape)
    if len({int(p.shape[dim]) for p in pieces}) != 1:
        return None
    chunk = node.graph.call_function(device_ops.chunk_at, (x, dim, len(pieces), index))
    chunk.meta = dict(node.meta)
    return chunk
