"""Ops that index: lookups, one-hot masks and device blocks, general gather and scatter,
top-k, prefix sums, and slices at a computed offset."""

from __future__ import annotations

import numpy as np

from scalify.ir import Node
from scalify.layout import Layout, Placement, local_shape
from scalify.ops import gather_scatter as indexing
from scalify.ops.coordinate_form import device_coordinate
from scalify.ops.spec import (
    TOGETHER,
    KeyInput,
    OpSpec,
    Scaling,
    attrs_and_shape_key,
    int_attrs_key,
    ints,
)
from scalify.values import NotSimulable, host

# take / take_along


def _lookup_key(k: KeyInput, sig) -> list[str]:
    sig.attrs_i["dim"] = int(k.node.attrs["dim"])
    sig.attrs_s["index_out"] = ints(range(k.ranks[1]))  # where the index dims land
    return [f"dim={k.node.attrs['dim']}"]


def _take_maps(node, shapes, out_rank) -> list[list[int]]:
    """The index dims first, then the table's dims but the looked-up one."""
    d, n = node.attrs["dim"], len(shapes[1])
    return [[-1 if e == d else n + e - (e > d) for e in range(len(shapes[0]))], list(range(n))]


def _take_along_maps(node, shapes, out_rank) -> list[list[int]]:
    """The looked-up dim is the index's; every other dim stays."""
    d = node.attrs["dim"]
    return [[-1 if e == d else e for e in range(len(shapes[0]))], list(range(len(shapes[1])))]


def _clamped(node, table: np.ndarray, index: np.ndarray) -> np.ndarray:
    """Indices clamped into range, as HLO gather does."""
    return np.clip(index, 0, table.shape[int(node.attrs["dim"])] - 1).astype(np.int64)


def _take(node, args) -> np.ndarray:
    """Whole slices of the table along `dim`, the index dims first."""
    table, index = args
    dim = int(node.attrs["dim"])
    index = _clamped(node, table, index)
    taken = np.take(table, index, axis=dim)
    moved = list(range(dim, dim + index.ndim))
    return np.moveaxis(taken, moved, list(range(index.ndim)))


def _take_along(node, args) -> np.ndarray:
    """One entry per row along `dim`."""
    table, index = args
    return np.take_along_axis(table, _clamped(node, table, index), axis=int(node.attrs["dim"]))


def _lookup_instance(b, along: bool) -> int:
    """A lookup in a randomly laid out table at randomly laid out indices (kept in range):
    whole rows (`take`) or one entry per row (`take_along`)."""
    d = int(b.rng.integers(2))
    table_shape = [b.size(), b.size()]
    t = b.input(tuple(table_shape), "f32", b.operand_layout(0, 2, b.layout(2)))
    if along:
        index_shape = list(table_shape)
        index_shape[d] = int(b.rng.integers(1, 3))
    else:
        index_shape = [b.size() for _ in range(int(b.rng.integers(1, 3)))]
    rank = len(index_shape)
    i = b.input(
        tuple(index_shape), "s32", b.operand_layout(1, rank, b.layout(rank, allow_partial=False))
    )
    for side in (b.base, b.dist):
        side[i].attrs["assumed_range"] = (0, table_shape[d] - 1)
    return b.op("take_along" if along else "take", (t, i), "f32", {"dim": d})


def asks_for_masked_lookup(b) -> bool:
    """A select whose second operand is a lookup: a device's masked lookup into its block."""
    return b.hints[1:2] in (["op:take"], ["op:take_along"])


def masked_lookup(b) -> int:
    """A device's masked lookup into its block of a table: select(in_block(i, r), take(t,
    block_offset(i, r)), 0), summed over the axis it should be a partial sum over. The
    coordinate's stride and count, the block size and the table's layout are right most of
    the time and wrong otherwise."""
    along = b.hints[1] == "op:take_along"
    axis = b.axis
    n = b.mesh.axis_size(axis)
    stride = b.mesh_stride(axis)

    c = int(b.rng.integers(1, 4))
    d = int(b.rng.integers(2))
    table_shape = [b.size(), b.size()]
    table_shape[d] = n * c
    layout: Layout = (Placement("shard", axis, dim=d),)
    if b.rng.random() >= 0.75:
        layout = b.layout(2)
    elif c > 1 and b.rng.random() < (0.9 if "padded" in b.values else 0.2):
        # a vocabulary padded to a multiple of the axis
        layout = (Placement("padded", "", dim=d, size=n * c), *layout)
        table_shape[d] -= int(b.rng.integers(1, c))
    t = b.input(tuple(table_shape), "f32", layout)
    if along:  # one entry per row: the index has the table's other dim and k entries along d
        index_shape = list(table_shape)
        index_shape[d] = int(b.rng.integers(1, 3))
    else:
        index_shape = [int(b.rng.integers(1, 4)) for _ in range(int(b.rng.integers(1, 3)))]
    index_layout = b.layout(len(index_shape), allow_partial=False)
    i = b.input(tuple(index_shape), "s32", () if b.rng.random() < 0.85 else index_layout)
    for side in (b.base, b.dist):
        side[i].attrs["assumed_range"] = (0, table_shape[d] - 1)
    coord = _device_coordinate(b, stride, n)
    # the block size the mask uses: wrong often, as it is what the lookup rules check
    block = {"size": c if b.rng.random() < 0.6 else int(b.rng.integers(1, 2 * c + 2))}
    local_index = b.dist[i].shape
    offset = b.dist_only("block_offset", (i, coord), local_index, "s32", block)
    mine = b.dist_only("in_block", (i, coord), local_index, "pred", block)
    op, kernel = ("take_along", _take_along) if along else ("take", _take)
    probe = Node(-1, op, (t, i), (), "f32", {"dim": d})
    args = [np.zeros(b.dist[t].shape), np.zeros(local_index, dtype=np.int64)]
    try:
        local_out = kernel(probe, args).shape
    except (ValueError, IndexError) as err:
        raise NotSimulable(f"ill-typed instance: {err}") from None
    taken = b.dist_only(op, (t, offset), local_out, "f32", {"dim": d})
    if not along:
        dims = tuple(range(len(local_index)))
        mine = b.dist_only("broadcast", (mine,), local_out, "pred", {"dims": dims})
    zero = b.dist_only("constant", (), (), "f32", {"value": "0"})
    zeros = b.dist_only("broadcast", (zero,), local_out, "f32", {"dims": ()})
    out = b.dist_only("select", (mine, taken, zeros), local_out, "f32", {})
    base_args = [np.zeros(table_shape), np.zeros(index_shape, dtype=np.int64)]
    base_out = kernel(probe, base_args).shape
    lookup = b.next_id
    b.next_id += 1
    b.base[lookup] = Node(lookup, op, (t, i), base_out, "f32", {"dim": d}, name=f"n{lookup}")
    b.lines.append(f"baseline n{lookup} = {op}[dim={d}](n{t}, n{i})")
    b.base_output = lookup
    return out


def asks_for_one_device(b) -> bool:
    """A select whose condition is a compare and whose other branch a fill: a value kept on
    the device whose coordinate is a given one and zero on every other."""
    return b.hints[:1] == ["op:compare"] and b.hints[2:3] == ["splat"]


def one_device_select(b) -> int:
    """select(coord(a) == k, x, z) over a value x of the baseline: x counted on device k
    alone, a partial sum of x over the axis when z is 0, x is the same on every device and
    k names a device of the axis. The coordinate, k, z and x's layout are each right most of
    the time and wrong otherwise."""
    axis = b.axis
    n = b.mesh.axis_size(axis)
    rank = 0 if b.rng.random() < 0.5 else int(b.rng.integers(1, 3))  # the pattern: a scalar
    shape = tuple(b.size() for _ in range(rank))
    x = b.input(shape, "f32", () if b.rng.random() < 0.75 else b.layout(len(shape)))
    local = b.dist[x].shape
    coord = _device_coordinate(b, b.mesh_stride(axis), n)
    k = int(b.rng.integers(n)) if b.rng.random() < 0.75 else (n, -1)[int(b.rng.integers(2))]
    k = b.dist_only("constant", (), (), "s32", {"value": str(k)})
    mine = b.dist_only("compare", (coord, k), (), "pred", {"direction": "EQ"})
    zeros = b.dist_only("constant", (), (), "f32", {"value": str(int(b.rng.random() < 0.2))})
    if local:
        mine = b.dist_only("broadcast", (mine,), local, "pred", {"dims": ()})
        zeros = b.dist_only("broadcast", (zeros,), local, "f32", {"dims": ()})
    b.lines.append(f"baseline: n{x}")
    b.base_output = x
    return b.dist_only("select", (mine, x, zeros), local, "f32", {})


def _device_coordinate(b, stride: int, n: int) -> int:
    """(partition id / s) % n as s32, with s and n right most of the time."""
    stride = b.maybe_wrong(stride)
    return device_coordinate(b.dist_only, b.maybe_wrong(n), stride, "s32")


def _group_slice(b, n: int, stride: int, q: int, unit: bool = False) -> int:
    """Block `(r // q)` of k entries of a replicated x, each of its n / q blocks taken by q
    neighbouring devices; stride, count and block size right most of the time. `unit`: one
    entry a device, at the group's coordinate itself (one KV head a device)."""
    rank = int(b.rng.integers(1, 3))
    shape = [b.size() for _ in range(rank)]
    d = int(b.rng.integers(rank))
    k = 1 if unit else b.size()
    shape[d] = n // q * k
    x = b.input(tuple(shape), "f32", ())
    offset = c = _device_coordinate(b, stride * q, n // q)
    if not unit:
        step = b.dist_only("constant", (), (), "s32", {"value": str(b.maybe_wrong(k))})
        offset = b.dist_only("mul", (c, step), (), "s32", {})
    size = list(shape)
    size[d] = k
    out = b.dist_only(
        "slice_at", (x, offset), tuple(size), "f32", {"dim": d, "size": k, "parts": n // q}
    )
    b.base_output = x
    return out


# in_block / block_offset: is an index in this device's block, and where in it


def _block_kernel(inside: bool):
    def kernel(node, args) -> np.ndarray:
        size = int(node.attrs["size"])
        start = args[1] * size
        if inside:
            return (args[0] >= start) & (args[0] < start + size)
        return np.clip(args[0] - start, 0, size - 1)

    return kernel


def _block_spec(name: str, inside: bool) -> OpSpec:
    return OpSpec(
        name,
        arity=(2,),
        attrs={"size": "I"},
        key=int_attrs_key("size"),
        dim_map=lambda node, shapes, out_rank: [list(range(len(shapes[0]))), []],
        kernel=_block_kernel(inside),
    )


# one_hot


def _one_hot_maps(node, shapes, out_rank) -> list[list[int]]:
    """A new dim at `dim`; the index's dims keep their order around it."""
    d = node.attrs["dim"]
    return [[e if e < d else e + 1 for e in range(len(shapes[0]))]]


def _one_hot(node, args) -> np.ndarray:
    dim, size = int(node.attrs["dim"]), int(node.attrs["size"])
    shape = [1] * (args[0].ndim + 1)
    shape[dim] = size
    return np.expand_dims(args[0], dim) == np.arange(size).reshape(shape)


def _one_hot_instance(b) -> int:
    """A one-hot of a randomly laid out integer tensor (partial sums included: the rule must
    not take them) along a random new dim."""
    rank = int(b.rng.integers(1, 3))
    i = b.input(
        tuple(b.size() for _ in range(rank)), "s32", b.operand_layout(0, rank, b.layout(rank))
    )
    dim = int(b.rng.integers(rank + 1))
    return b.op("one_hot", (i,), "pred", {"dim": dim, "size": int(b.rng.integers(2, 6))})


# top_k


_k_and_part = int_attrs_key("k", "part")


def _top_k_key(k: KeyInput, sig) -> list[str]:
    return _k_and_part(k, sig) + [f"largest={k.node.attrs.get('largest', True)}"]


def _top_k(node, args) -> np.ndarray:
    """One result of HLO `topk` along the last dim: values (tuple index 0) or their indices
    (1). Ties keep the lower index first, as XLA's sort-based lowering does."""
    x = args[0]
    k = int(node.attrs["k"])
    keys = -x if node.attrs.get("largest", True) else x
    order = np.argsort(keys, axis=-1, kind="stable")[..., :k]
    if node.attrs.get("part") == 1:
        return host(order, node.dtype)
    return np.take_along_axis(x, order, axis=-1)


def _top_k_instance(b) -> int:
    """The k largest entries of the last dim (values or indices) of a randomly laid out x."""
    rank = int(b.rng.integers(1, 4))
    x = b.input(
        tuple(b.size() for _ in range(rank)), "f32", b.operand_layout(0, rank, b.layout(rank))
    )
    part = int(b.rng.integers(2))
    k = int(b.rng.integers(1, b.dist[x].shape[-1] + 1))
    return b.op("top_k", (x,), "s32" if part else "f32", {"k": k, "part": part, "largest": True})


# sort


def _sort(node, args) -> np.ndarray:
    """One result of HLO `sort` along `dim` (tuple index `part`): every operand put in the
    stable order of the first, ascending or descending (argsort is a sort of the keys with
    an iota beside them)."""
    keys = args[0]
    if keys.dtype.kind in "ub":
        keys = keys.astype(np.int64)
    dim = int(node.attrs["dim"])
    order = np.argsort(-keys if node.attrs["descending"] else keys, axis=dim, kind="stable")
    return np.take_along_axis(args[int(node.attrs["part"])], order, axis=dim)


def _sort_instance(b) -> int:
    """A stable sort of a randomly laid out x along a dim (its values or an iota beside it)."""
    rank = int(b.rng.integers(1, 3))
    shape = tuple(b.size() for _ in range(rank))
    x = b.input(shape, "f32", b.operand_layout(0, rank, b.layout(rank)))
    dim = int(b.rng.integers(rank))
    if b.rng.random() < 0.5:
        attrs = {"dim": dim, "descending": bool(b.rng.integers(2)), "part": 0}
        return b.op("sort", (x,), "f32", attrs)
    index = b.op("iota", (), "s32", {}, lambda side: ({"dim": dim}, side[x].shape))
    attrs = {"dim": dim, "descending": bool(b.rng.integers(2)), "part": 1}
    return b.op("sort", (x, index), "s32", attrs)


# cumsum


def _cumsum_instance(b) -> int:
    """A prefix sum along a random dim of a randomly laid out x."""
    rank = int(b.rng.integers(1, 4))
    x = b.input(
        tuple(b.size() for _ in range(rank)), "f32", b.operand_layout(0, rank, b.layout(rank))
    )
    return b.op("cumsum", (x,), "f32", {"dim": int(b.rng.integers(rank))})


# slice_at: a slice at a computed (device-dependent) offset


def _slice_at(node, args) -> np.ndarray:
    a = node.attrs
    dim, size = int(a["dim"]), int(a["size"])
    start = min(max(int(args[1]), 0), args[0].shape[dim] - size)
    return np.take(args[0], range(start, start + size), axis=dim)


# update_at: x with a block written at a computed offset along one dim


def _update_at(node, args) -> np.ndarray:
    """XLA's dynamic-update-slice along one dim: the start clamped so the block fits."""
    dim = int(node.attrs["dim"])
    starts = [args[2] if d == dim else 0 for d in range(args[0].ndim)]
    return _dynamic_update_slice(node, [args[0], args[1], *starts])


def _dynamic_update_slice(node, args) -> np.ndarray:
    x, block = args[0], args[1]
    starts = [
        min(max(int(s), 0), n - k) for s, n, k in zip(args[2:], x.shape, block.shape, strict=True)
    ]
    out = np.array(x, copy=True)
    out[tuple(slice(s, s + k) for s, k in zip(starts, block.shape, strict=True))] = block
    return out


def _update_at_maps(node, shapes, out_rank) -> list[list[int]]:
    """x and the block keep every dim but the one written along; the offset has none."""
    dim = int(node.attrs["dim"])
    kept = [d if d != dim else -1 for d in range(out_rank)]
    return [kept, kept, []]


def _update_at_instance(b) -> int:
    """A block written into x at a replicated offset along a random dim; x and the block
    laid out at random, most often alike."""
    rank = int(b.rng.integers(1, 4))
    shape = tuple(b.size() for _ in range(rank))
    dim = int(b.rng.integers(rank))
    block = tuple(1 if d == dim else n for d, n in enumerate(shape))
    layout = b.operand_layout(0, rank, b.layout(rank, allow_partial=False))
    x = b.input(shape, "f32", layout)
    u = b.input(block, "f32", b.operand_layout(1, rank, layout))
    start = b.input((), "s32", ())
    return b.op("update_at", (x, u, start), "f32", {"dim": dim})


def device_slice(b) -> int:
    """A slice of x at offset k * ((partition id / s) % n), with s, n and k right for a random
    axis most of the time and wrong otherwise; x is replicated over the axis, or not. A
    fifth of the time the blocks are fewer than the devices: groups of q neighbours take one
    block each, at k * ((partition id / (s * q)) % (n / q)) (a KV head shared by q devices)."""
    names = b.mesh.names
    axis = names[int(b.rng.integers(len(names)))]
    n = b.mesh.axis_size(axis)
    stride = b.mesh_stride(axis)
    maybe_wrong = b.maybe_wrong

    rank = int(b.rng.integers(1, 3))
    shape = [b.size() for _ in range(rank)]
    d = int(b.rng.integers(rank))
    unit_slices = b.rng.random() < 0.3  # one entry per device: the offset is the coordinate
    groups = [q for q in range(2, n + 1) if n % q == 0]
    if groups and b.rng.random() < 0.3:
        q = groups[int(b.rng.integers(len(groups)))]
        return _group_slice(b, n, stride, q, unit=unit_slices)
    shape[d] = n * (
        int(b.rng.integers(1, 3)) if unit_slices else b.unit * int(b.rng.integers(1, 3))
    )
    layout = () if b.rng.random() < 0.7 else b.layout(rank)
    x = b.input(tuple(shape), "f32", layout)
    local = b.dist[x].shape[d]
    k = max(1, local // n)
    if 0 in b.dist[x].shape or local % k:
        raise NotSimulable("slice size does not divide the dim")
    c = _device_coordinate(b, stride, n)
    if unit_slices and k == 1:
        offset = c
    else:
        step = b.dist_only("constant", (), (), "s32", {"value": str(maybe_wrong(k))})
        offset = b.dist_only("mul", (c, step), (), "s32", {})
    size = list(b.dist[x].shape)
    size[d] = k
    out = b.dist_only(
        "slice_at",
        (x, offset),
        tuple(size),
        "f32",
        {"dim": d, "size": k, "parts": b.dist[x].shape[d] // k},
    )
    b.base_output = x  # the baseline is x itself; the slice relates to it by a layout
    return out


def _dynamic_slice(node, args) -> np.ndarray:
    sizes = tuple(node.attrs.get("sizes", node.shape))
    starts = [
        min(max(int(s), 0), dim - size)
        for s, dim, size in zip(args[1:], args[0].shape, sizes, strict=True)
    ]
    index = tuple(slice(s, s + size) for s, size in zip(starts, sizes, strict=True))
    return args[0][index]


# gather / scatter: HLO's general forms


def _gather_maps(node, shapes, out_rank) -> list[list[int]]:
    """The indices' dims (but the index vector) land on the output's batch positions, in
    order; of the operand only its batching dims land, where their indices dims do. Window
    dims are not mapped: a shard of one is no block of what the gather takes."""
    a = node.attrs
    ranks = [len(s) for s in shapes]
    positions = [p for p in range(out_rank) if p not in a["offset_dims"]]
    index_dims = [e for e in range(ranks[1]) if e != a["index_vector_dim"]]
    index_map = [
        positions[index_dims.index(e)]
        if e in index_dims and len(positions) == len(index_dims)
        else -1
        for e in range(ranks[1])
    ]
    paired = dict(zip(a["operand_batching_dims"], a["start_indices_batching_dims"], strict=True))
    operand_map = [index_map[paired[d]] if d in paired else -1 for d in range(ranks[0])]
    return [operand_map, index_map]


def _scatter_maps(node, shapes, out_rank) -> list[list[int]]:
    """Only batching dims are mapped, to the operand's (the output's) batching dim: of the
    operand itself, of the indices, and of the updates' scatter dims (which follow the
    indices' dims but the index vector, in order)."""
    a = node.attrs
    ranks = [len(s) for s in shapes]
    operand_dims, index_batch = a["input_batching_dims"], a["scatter_indices_batching_dims"]
    paired = dict(zip(index_batch, operand_dims, strict=True))
    operand_map = [d if d in operand_dims else -1 for d in range(ranks[0])]
    index_map = [paired.get(e, -1) for e in range(ranks[1])]
    index_dims = [e for e in range(ranks[1]) if e != a["index_vector_dim"]]
    scatter_dims = [d for d in range(ranks[2]) if d not in a["update_window_dims"]]
    update_map = [-1] * ranks[2]
    if len(scatter_dims) == len(index_dims):
        for d, e in zip(scatter_dims, index_dims, strict=True):
            update_map[d] = paired.get(e, -1)
    return [operand_map, index_map, update_map]


def _scatter_key(k: KeyInput, sig) -> list[str]:
    """The buffer's sizes but its batching dims: a fill has none."""
    node, a = k.node, k.node.attrs
    batching = a["input_batching_dims"]
    sig.attrs_s["op"] = str(a["op"])
    return [
        repr(sorted((name, str(v)) for name, v in a.items())),
        "sizes=" + ints(n for d, n in enumerate(node.shape) if d not in batching),
    ]


def _batching_types(op: str, operand_dims: str, index_dims: str):
    def check(attrs: dict, shapes: list[tuple[int, ...]]) -> None:
        pairs = zip(attrs[operand_dims], attrs[index_dims], strict=True)
        if any(shapes[0][d] != shapes[1][e] for d, e in pairs):
            raise NotSimulable(f"ill-typed {op}: batching dims of different sizes")

    return check


def _scatter_types(attrs: dict, shapes: list[tuple[int, ...]]) -> None:
    _batching_types("scatter", "input_batching_dims", "scatter_indices_batching_dims")(
        attrs, shapes
    )
    vector = attrs["index_vector_dim"]  # each update's position is an index vector's position
    counts = [n for e, n in enumerate(shapes[1]) if e != vector]
    window = attrs["update_window_dims"]
    if [n for d, n in enumerate(shapes[2]) if d not in window] != counts:
        raise NotSimulable("ill-typed scatter: indices and updates of different counts")


def _batched_indexing(b, scatter: bool) -> int:
    """A gather or scatter vmapped over a batch dim (dim 0 of every operand), as JAX emits
    it: operand (batch, entries, width), indices (batch, count, 1) kept in range (a scatter's
    one past the end too: its window is dropped), updates (batch, count, width). Every
    operand is laid out at random, so a batch shard meets other shards and replicas."""
    batch, entries, count, width = b.size(), b.size(), b.size(), int(b.rng.integers(1, 4))
    if scatter and b.hint(0) == "splat":
        layout = b.operand_layout(1, 3, b.layout(3, allow_partial=False))
        dist = local_shape((batch, entries, width), (), b.mesh)
        dist = (local_shape((batch, count, 1), layout, b.mesh)[0], *dist[1:])
        operand = b.fill((batch, entries, width), dist, "f32")
        hints = (layout, None)
    else:
        operand = b.input((batch, entries, width), "f32", b.operand_layout(0, 3, b.layout(3)))
        hints = (None, None)
    index_layout = hints[0]
    if index_layout is None:
        index_layout = b.operand_layout(1, 3, b.layout(3, allow_partial=False))
    index = b.input((batch, count, 1), "s32", index_layout)
    for side in (b.base, b.dist):
        side[index].attrs["assumed_range"] = (0, entries if scatter else entries - 1)
    if not scatter:
        attrs = {
            "offset_dims": (2,),
            "collapsed_slice_dims": (1,),
            "start_index_map": (1,),
            "operand_batching_dims": (0,),
            "start_indices_batching_dims": (0,),
            "index_vector_dim": 2,
        }
        return b.op(
            "gather",
            (operand, index),
            "f32",
            attrs,
            lambda side: ({"slice_sizes": (1, 1, side[operand].shape[2])}, None),
        )
    updates = b.input((batch, count, width), "f32", b.operand_layout(2, 3, b.layout(3)))
    attrs = {
        "update_window_dims": (2,),
        "inserted_window_dims": (1,),
        "scatter_dims_to_operand_dims": (1,),
        "input_batching_dims": (0,),
        "scatter_indices_batching_dims": (0,),
        "index_vector_dim": 2,
        "op": "sum" if b.rng.random() < 0.8 else "max",
    }
    return b.op("scatter", (operand, index, updates), "f32", attrs)


def _lookup_spec(name: str, dim_map, kernel, along: bool) -> OpSpec:
    """A lookup into a table along one dim: rows (`take`) or one entry per row
    (`take_along`). The table's size along that dim is stated to the engine (`size(T, d)`)."""
    return OpSpec(
        name,
        arity=(2,),
        attrs={"dim": "I", "index_out": "S"},
        key=_lookup_key,
        dim_map=dim_map,
        kernel=kernel,
        generate=lambda b: _lookup_instance(b, along=along),
        sized_operand=True,
        scaling=Scaling("each", (0,)),
    )


OPS = [
    _lookup_spec("take", _take_maps, _take, along=False),
    _lookup_spec("take_along", _take_along_maps, _take_along, along=True),
    _block_spec("in_block", inside=True),
    _block_spec("block_offset", inside=False),
    OpSpec(
        "one_hot",
        arity=(1,),
        attrs={"dim": "I", "size": "I"},
        key=int_attrs_key("dim", "size"),
        dim_map=_one_hot_maps,
        kernel=_one_hot,
        generate=_one_hot_instance,
    ),
    OpSpec(
        "top_k",
        arity=(1,),
        attrs={"k": "I", "part": "I"},
        key=_top_k_key,
        dim_map=lambda node, shapes, out_rank: [  # the last dim is replaced by the k chosen
            [d if d < len(shapes[0]) - 1 else -1 for d in range(len(shapes[0]))]
        ],
        kernel=_top_k,
        generate=_top_k_instance,
    ),
    OpSpec(
        "sort",
        key=attrs_and_shape_key,
        kernel=_sort,
        generate=_sort_instance,
    ),
    OpSpec(
        "cumsum",
        arity=(1,),
        attrs={"dim": "I"},
        key=int_attrs_key("dim"),
        # every dim stays; a shard of the summed dim is no block of the result
        dim_map=lambda node, shapes, out_rank: [list(range(len(shapes[0])))],
        kernel=lambda node, args: np.cumsum(args[0], axis=int(node.attrs["dim"])).astype(
            args[0].dtype
        ),
        generate=_cumsum_instance,
        scaling=TOGETHER,
    ),
    OpSpec(
        "slice_at",
        arity=(2,),
        attrs={"dim": "I", "size": "I", "parts": "I"},
        key=int_attrs_key("dim", "size", "parts"),
        kernel=_slice_at,
        generate=device_slice,
        scaling=Scaling("each", (0,)),
    ),
    OpSpec("dynamic_slice", key=attrs_and_shape_key, kernel=_dynamic_slice),
    OpSpec("dynamic_update_slice", key=attrs_and_shape_key, kernel=_dynamic_update_slice),
    OpSpec(
        "update_at",
        arity=(3,),
        attrs={"dim": "I"},
        key=int_attrs_key("dim"),
        dim_map=_update_at_maps,
        kernel=_update_at,
        generate=_update_at_instance,
        scaling=Scaling("together", (0, 1)),
    ),
    OpSpec(
        "gather",
        arity=(2,),
        dim_map=_gather_maps,
        kernel=lambda node, args: indexing.gather(node, args[0], args[1]),
        generate=lambda b: _batched_indexing(b, scatter=False),
        check_types=_batching_types(
            "gather", "operand_batching_dims", "start_indices_batching_dims"
        ),
        scaling=Scaling("each", (0,)),
    ),
    OpSpec(
        "scatter",
        arity=(3,),
        attrs={"op": "S"},
        key=_scatter_key,
        dim_map=_scatter_maps,
        kernel=lambda node, args: indexing.scatter(node, args[0], args[1], args[2]),
        generate=lambda b: _batched_indexing(b, scatter=True),
        check_types=_scatter_types,
        scaling=Scaling("together", (0, 2), when=("op", ("sum", "max", "min", "replace"))),
    ),
]
