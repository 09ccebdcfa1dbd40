"""Inputs and literals, contraction, reduction and the ops that move data around."""

from __future__ import annotations

import re
import zlib

import numpy as np

from scalify.layout import Placement
from scalify.ops.spec import (
    EACH,
    TOGETHER,
    KeyInput,
    OpSpec,
    Scaling,
    attrs_and_shape_key,
    int_attrs_key,
    ints,
)
from scalify.values import REDUCERS, NotSimulable, host

_NUMBER = re.compile(r"-?inf|nan|true|false|[-+0-9.eE]+")


def is_elided(text: str) -> bool:
    """A literal the dump prints as `{...}` (large constants, by default in XLA's text)."""
    return text.replace(" ", "") in ("{...}", "...")


def _stand_in(node) -> np.ndarray:
    """Values for an elided literal: the same for every literal of that type and shape, as
    the proof takes them to be (their terms are equal), so both programs see one value."""
    seed = zlib.crc32(f"{node.dtype}{node.shape}".encode())
    values = np.random.default_rng(seed).integers(-4, 5, size=node.shape)
    return host(values, node.dtype)


def _constant(node, args) -> np.ndarray:
    """The literal's text, read as numbers filling the shape."""
    text = str(node.attrs.get("value", ""))
    tokens = _NUMBER.findall(text)
    if is_elided(text):
        return _stand_in(node)
    values = [float(t) if t not in ("true", "false") else t == "true" for t in tokens]
    if node.dtype.startswith("c"):  # `(re, im)` pairs
        values = [complex(re, im) for re, im in zip(values[::2], values[1::2], strict=False)]
    size = int(np.prod(node.shape)) if node.shape else 1
    if len(values) != size:
        raise NotSimulable(f"constant literal {text[:40]!r} does not fill shape {node.shape}")
    return host(np.array(values).reshape(node.shape), node.dtype)


def _iota(node, args) -> np.ndarray:
    dim = int(node.attrs.get("dim", 0))
    shape = [1] * len(node.shape)
    shape[dim] = node.shape[dim]
    return host(np.broadcast_to(np.arange(node.shape[dim]).reshape(shape), node.shape), node.dtype)


# dot


def _dot_key(k: KeyInput, sig) -> list[str]:
    a = k.node.attrs
    batch = a.get("lhs_batch", ())
    sig.attrs_s["lhs_batch"] = ints(batch)
    sig.attrs_s["batch_out"] = ints(range(len(batch)))  # where the batch dims land
    return [
        f"lb={ints(a.get('lhs_batch', ()))}",
        f"rb={ints(a.get('rhs_batch', ()))}",
        f"lc={ints(a.get('lhs_contracting', ()))}",
        f"rc={ints(a.get('rhs_contracting', ()))}",
    ]


def _dot_maps(node, shapes, out_rank) -> list[list[int]]:
    """Batch dims first, then the lhs's free dims, then the rhs's; the i-th contracted pair
    is -1 - i on both sides."""
    ranks = [len(s) for s in shapes]
    a = node.attrs
    lb, rb = tuple(a.get("lhs_batch", ())), tuple(a.get("rhs_batch", ()))
    lc, rc = tuple(a.get("lhs_contracting", ())), tuple(a.get("rhs_contracting", ()))
    lhs_free = [d for d in range(ranks[0]) if d not in lb and d not in lc]
    rhs_free = [d for d in range(ranks[1]) if d not in rb and d not in rc]
    lhs = [0] * ranks[0]
    rhs = [0] * ranks[1]
    for i, (l_dim, r_dim) in enumerate(zip(lb, rb, strict=True)):
        lhs[l_dim], rhs[r_dim] = i, i
    for i, (l_dim, r_dim) in enumerate(zip(lc, rc, strict=True)):
        lhs[l_dim], rhs[r_dim] = -1 - i, -1 - i
    for j, d in enumerate(lhs_free):
        lhs[d] = len(lb) + j
    for j, d in enumerate(rhs_free):
        rhs[d] = len(lb) + len(lhs_free) + j
    return [lhs, rhs]


def _dot(node, args) -> np.ndarray:
    lhs, rhs = args
    a = node.attrs
    letters = iter("abcdefghijklmnopqrstuvwxyz")
    lhs_idx = [""] * lhs.ndim
    rhs_idx = [""] * rhs.ndim
    for l_dim, r_dim in zip(a.get("lhs_batch", ()), a.get("rhs_batch", ()), strict=True):
        lhs_idx[l_dim] = rhs_idx[r_dim] = next(letters)
    for l_dim, r_dim in zip(
        a.get("lhs_contracting", ()), a.get("rhs_contracting", ()), strict=True
    ):
        lhs_idx[l_dim] = rhs_idx[r_dim] = next(letters)
    batch = [lhs_idx[d] for d in a.get("lhs_batch", ())]
    for idx in (lhs_idx, rhs_idx):
        for d, letter in enumerate(idx):
            if not letter:
                idx[d] = next(letters)
    free_l = [
        x
        for d, x in enumerate(lhs_idx)
        if d not in a.get("lhs_batch", ()) and d not in a.get("lhs_contracting", ())
    ]
    free_r = [
        x
        for d, x in enumerate(rhs_idx)
        if d not in a.get("rhs_batch", ()) and d not in a.get("rhs_contracting", ())
    ]
    spec = f"{''.join(lhs_idx)},{''.join(rhs_idx)}->{''.join(batch + free_l + free_r)}"
    return np.einsum(spec, lhs, rhs)


def _dot_types(attrs: dict, shapes: list[tuple[int, ...]]) -> None:
    pairs = list(zip(attrs["lhs_batch"], attrs["rhs_batch"], strict=True)) + list(
        zip(attrs["lhs_contracting"], attrs["rhs_contracting"], strict=True)
    )
    if any(shapes[0][l_dim] != shapes[1][r_dim] for l_dim, r_dim in pairs):
        raise NotSimulable("ill-typed dot")


def _dot_instance(b) -> int:
    batch = int(b.rng.integers(0, 2))
    free_l, free_r, contract = 1, int(b.rng.integers(0, 2)) + 1, int(b.rng.integers(1, 3))
    sizes = {k: b.size() for k in range(batch + free_l + free_r + contract)}
    lhs_dims = (
        list(range(batch))
        + [batch + i for i in range(free_l)]
        + [batch + free_l + free_r + i for i in range(contract)]
    )
    rhs_dims = (
        list(range(batch))
        + [batch + free_l + free_r + i for i in range(contract)]
        + [batch + free_l + i for i in range(free_r)]
    )
    b.rng.shuffle(lhs_dims)
    b.rng.shuffle(rhs_dims)
    lhs_layout = b.operand_layout(
        0, len(lhs_dims), () if b.rng.random() < 0.3 else b.layout(len(lhs_dims))
    )
    rhs_layout = b.operand_layout(
        1, len(rhs_dims), () if b.rng.random() < 0.3 else b.layout(len(rhs_dims))
    )
    contracted = [batch + free_l + free_r + i for i in range(contract)]
    kinds = (b.hint(0), b.hint(1))
    if all(k in ("padded", "repeated") for k in kinds) and b.rng.random() < 0.7:
        # a rule over a padded (or repeated) pair: both operands cut alike on one shared dim
        shared = int(b.rng.choice(list(range(batch)) + contracted))
        lhs_layout, rhs_layout = (
            b.value_placements(kind, dims.index(shared))
            + (Placement("shard", b.axis, dim=dims.index(shared)),)
            for kind, dims in zip(kinds, (lhs_dims, rhs_dims), strict=True)
        )
    lhs = b.input(tuple(sizes[d] for d in lhs_dims), "f32", lhs_layout)
    rhs = b.input(tuple(sizes[d] for d in rhs_dims), "f32", rhs_layout)
    attrs = {
        "lhs_batch": tuple(lhs_dims.index(d) for d in range(batch)),
        "rhs_batch": tuple(rhs_dims.index(d) for d in range(batch)),
        "lhs_contracting": tuple(lhs_dims.index(d) for d in contracted),
        "rhs_contracting": tuple(rhs_dims.index(d) for d in contracted),
    }
    return b.op("dot", (lhs, rhs), "f32", attrs)


# reduce


def _reduce_key(k: KeyInput, sig) -> list[str]:
    a = k.node.attrs
    sig.attrs_s["op"] = a["op"]
    kept = [d for d in range(k.ranks[0]) if d not in a["dims"]]
    sig.attrs_s["kept"] = ints(kept)
    sig.attrs_s["kept_out"] = ints(range(len(kept)))  # where the kept dims land
    return [f"dims={ints(a['dims'])}", f"op={a['op']}"]


def _reduce_maps(node, shapes, out_rank) -> list[list[int]]:
    rank = len(shapes[0])
    dims = set(node.attrs["dims"])
    kept = [d for d in range(rank) if d not in dims]
    return [[-1 if d in dims else kept.index(d) for d in range(rank)]]


def _reduce(node, args) -> np.ndarray:
    op = node.attrs["op"]
    dims = tuple(node.attrs["dims"])
    result = REDUCERS[op].reduce(args[0], axis=dims) if dims else args[0]
    if len(args) > 1:
        result = REDUCERS[op](result, args[1])
    return np.asarray(result)


def _reduce_instance(b) -> int:
    rank = int(b.rng.integers(1, 4))
    x = b.input(
        tuple(b.size() for _ in range(rank)), "f32", b.operand_layout(0, rank, b.layout(rank))
    )
    dims = tuple(
        sorted(b.rng.choice(rank, size=int(b.rng.integers(1, rank + 1)), replace=False).tolist())
    )
    op = "sum" if b.rng.random() < 0.6 else "max"
    return b.op("reduce", (x,), "f32", {"dims": dims, "op": op})


# broadcast


def _broadcast_key(k: KeyInput, sig) -> list[str]:
    node, a = k.node, k.node.attrs
    parts = [f"dims={ints(a['dims'])}"]
    sig.attrs_s["dims"] = ints(a["dims"])
    new = [d for d in range(len(node.shape)) if d not in a["dims"]]
    if len(new) == 1 and list(a["dims"]) == sorted(a["dims"]):
        sig.attrs_i["new_dim"] = new[0]  # the one dim it adds, the others kept in order
    parts.append(f"rank={len(node.shape)}")
    if k.shape_free_broadcast:
        sig.attrs_s["sizes"] = "free"
    else:
        new = [f"{d}:{n}" for d, n in enumerate(node.shape) if d not in a["dims"]]
        parts.append("new=" + ints(new))
        # each new dim's size, and the key without it: the prelude's `broadcast-block` pairs
        # two broadcasts of one value that differ in that size alone
        for i, d in enumerate(d for d in range(len(node.shape)) if d not in a["dims"]):
            sig.attrs_i[f"new_size:{d}"] = node.shape[d]
            sig.attrs_s[f"new_rest:{d}"] = ";".join(parts[:2] + new[:i] + new[i + 1 :])
    return parts


def _broadcast(node, args) -> np.ndarray:
    x = args[0]
    dims = tuple(node.attrs["dims"])
    shape = [1] * len(node.shape)
    for i, d in enumerate(dims):
        shape[d] = x.shape[i]
    return np.broadcast_to(x.reshape(shape), node.shape).copy()


def _broadcast_instance(b) -> int:
    rank = int(b.rng.integers(1, 3))
    x_shape = tuple(b.size() for _ in range(rank))
    x_layout = b.operand_layout(0, rank, b.layout(rank))
    x = b.input(x_shape, "f32", x_layout)
    out_rank = rank + int(b.rng.integers(1, 3))
    dims = tuple(sorted(b.rng.choice(out_rank, size=rank, replace=False).tolist()))
    out = [b.size() for _ in range(out_rank)]
    for i, d in enumerate(dims):
        out[d] = x_shape[i]
    local = list(out)
    for i, d in enumerate(dims):
        local[d] = b.dist[x].shape[i]
    return b.op(
        "broadcast",
        (x,),
        "f32",
        {"dims": dims},
        lambda side: ({}, tuple(out) if side is b.base else tuple(local)),
    )


# reshape and its view steps


def _reshape_key(k: KeyInput, sig) -> list[str]:
    return [f"from={ints(k.operands[0].shape)}", f"to={ints(k.node.shape)}"]


def _reshape(node, args) -> np.ndarray:
    return args[0].reshape(node.shape)


def _merge_maps(node, shapes, out_rank) -> list[list[int]]:
    """Dims p, p+1 -> p: only a shard of the outer dim stays a shard."""
    p = node.attrs["dim"]
    return [[d if d <= p else (-1 if d == p + 1 else d - 1) for d in range(len(shapes[0]))]]


def _split_maps(node, shapes, out_rank) -> list[list[int]]:
    """Dim p -> (p, p+1): a shard of it lands on the outer part."""
    p = node.attrs["dim"]
    return [[d if d <= p else d + 1 for d in range(len(shapes[0]))]]


def _merge_instance(b) -> int:
    if b.hint(0) == "broadcast":
        return _repeats_instance(b)
    if b.hint(0) == "op:split":
        b.hints = []
        x = _split_instance(b)
        p = (
            b.base[x].attrs["dim"]
            if b.rng.random() < 0.8
            else int(b.rng.integers(len(b.base[x].shape) - 1))
        )
        return _merge_of(b, x, p)
    rank = int(b.rng.integers(2, 4))
    x = b.input(
        tuple(b.size() for _ in range(rank)), "f32", b.operand_layout(0, rank, b.layout(rank))
    )
    return _merge_of(b, x, int(b.rng.integers(rank - 1)))


def _repeats_instance(b) -> int:
    """A replicated x broadcast along a new dim of size q right after dim p and merged into
    p: each element of dim p repeated q times (a program repeating KV heads for the q heads
    that read them); q = 1 repeats nothing. The baseline is x itself, related by a layout."""
    b.hints = []
    rank = int(b.rng.integers(1, 3))
    x = b.input(tuple(b.size() for _ in range(rank)), "f32", ())
    p, q = int(b.rng.integers(rank)), int(b.rng.integers(1, 4))

    def spread(side):
        shape = side[x].shape
        dims = tuple(d if d <= p else d + 1 for d in range(rank))
        return {"dims": dims}, shape[: p + 1] + (q,) + shape[p + 1 :]

    out = _merge_of(b, b.op("broadcast", (x,), "f32", {}, spread), p)
    b.base_output = x
    return out


def _merge_of(b, x: int, p: int) -> int:
    def per_side(side):
        shape = side[x].shape
        merged = shape[:p] + (shape[p] * shape[p + 1],) + shape[p + 2 :]
        return {"dim": p, "inner": shape[p + 1]}, merged

    return b.op("merge", (x,), "f32", {}, per_side)


def _split_instance(b) -> int:
    if b.hint(0) == "op:merge":
        b.hints = []
        x = _merge_instance(b)
        p = b.base[x].attrs["dim"]
        merged_inner = b.base[x].attrs["inner"]
        divisors = [q for q in range(1, b.base[x].shape[p] + 1) if b.base[x].shape[p] % q == 0]
        q = merged_inner if b.rng.random() < 0.8 else divisors[int(b.rng.integers(len(divisors)))]
        return _split_of(b, x, p, q)
    rank = int(b.rng.integers(1, 3))
    shape = [b.size() for _ in range(rank)]
    p = int(b.rng.integers(rank))
    shape[p] *= b.unit
    x = b.input(tuple(shape), "f32", b.operand_layout(0, rank, b.layout(rank)))
    divisors = [q for q in range(1, shape[p] + 1) if shape[p] % q == 0]
    return _split_of(b, x, p, divisors[int(b.rng.integers(len(divisors)))])


def _split_of(b, x: int, p: int, q: int) -> int:
    keep_inner = b.rng.random() < 0.8

    def per_side(side):
        size = side[x].shape[p]
        local_q = (
            q
            if size % q == 0 and keep_inner
            else max(d for d in range(1, size + 1) if size % d == 0 and d <= q)
        )
        out = side[x].shape[:p] + (size // local_q, local_q) + side[x].shape[p + 1 :]
        return {"dim": p, "inner": local_q}, out

    return b.op("split", (x,), "f32", {}, per_side)


# transpose


def _transpose_maps(node, shapes, out_rank) -> list[list[int]]:
    perm = list(node.attrs["perm"])
    return [[perm.index(d) for d in range(len(shapes[0]))]]


def _transpose_instance(b) -> int:
    rank = int(b.rng.integers(2, 4))
    x = b.input(
        tuple(b.size() for _ in range(rank)), "f32", b.operand_layout(0, rank, b.layout(rank))
    )
    return b.op("transpose", (x,), "f32", {"perm": tuple(b.rng.permutation(rank).tolist())})


# slice


def _slices(node, shape: tuple[int, ...]) -> list[tuple[int, int, int, int]]:
    """(dim, start, limit, stride) of each dim the slice does not take whole."""
    a = node.attrs
    return [
        (d, start, limit, stride)
        for d, (start, limit, stride) in enumerate(
            zip(a["starts"], a["limits"], a["strides"], strict=True)
        )
        if (start, limit, stride) != (0, shape[d], 1)
    ]


def _slice_key(k: KeyInput, sig) -> list[str]:
    """The cut of every dim sliced; a slice of one dim also states it to rules (`cut`,
    `start`, `limit`, `stride`: a padding sliced off, rules/padding.srl)."""
    cuts = _slices(k.node, k.operands[0].shape)
    if len(cuts) == 1:
        for name, value in zip(("cut", "start", "limit", "stride"), cuts[0], strict=True):
            sig.attrs_i[name] = int(value)
    return [f"{d}:{s}:{e}:{st}" for d, s, e, st in cuts]


def _slice_maps(node, shapes, out_rank) -> list[list[int]]:
    sliced = {d for d, *_ in _slices(node, shapes[0])}
    return [[-1 if d in sliced else d for d in range(len(shapes[0]))]]


def _slice(node, args) -> np.ndarray:
    a = node.attrs
    index = tuple(
        slice(s, e, st) for s, e, st in zip(a["starts"], a["limits"], a["strides"], strict=True)
    )
    return args[0][index]


def _slice_instance(b) -> int:
    if "padded" in b.values and b.rng.random() < 0.8:
        return _padding_sliced_off(b)
    rank = int(b.rng.integers(1, 4))
    x = b.input(
        tuple(b.size() for _ in range(rank)), "f32", b.operand_layout(0, rank, b.layout(rank))
    )
    d = int(b.rng.integers(rank))
    start = int(b.rng.integers(b.base[x].shape[d] // 2 + 1))

    def per_side(side):
        shape = side[x].shape
        starts = [0] * rank
        starts[d] = min(start, shape[d] - 1)
        return {"starts": tuple(starts), "limits": tuple(shape), "strides": (1,) * rank}, None

    return b.op("slice", (x,), "f32", {}, per_side)


def _padding_sliced_off(b) -> int:
    """A padded value cut back to its first m entries along the padded dim: m its unpadded
    size most of the time, another size otherwise."""
    rank = int(b.rng.integers(1, 4))
    d = int(b.rng.integers(rank))
    shape = tuple(b.size() for _ in range(rank))
    x = b.input(shape, "f32", b.value_placements("padded", d))
    m = shape[d] if b.rng.random() < 0.7 else int(b.rng.integers(1, 3 * b.unit + 1))

    def per_side(side):
        limits = list(side[x].shape)
        limits[d] = min(m, limits[d])
        return {"starts": (0,) * rank, "limits": tuple(limits), "strides": (1,) * rank}, None

    return b.op("slice", (x,), "f32", {}, per_side)


# concatenate


def _concatenate_maps(node, shapes, out_rank) -> list[list[int]]:
    return [[-1 if d == node.attrs["dim"] else d for d in range(len(s))] for s in shapes]


def _concatenate_instance(b) -> int:
    """Two or three parts (as many as the rule under test has operands), laid out alike
    most of the time, joined along a dim that, most of the time, no part is split along."""
    rank = int(b.rng.integers(1, 4))
    shape = tuple(b.size() for _ in range(rank))
    layout = b.operand_layout(0, rank, b.layout(rank))
    x = b.input(shape, "f32", layout)
    count = len(b.hints) if len(b.hints) in (2, 3) else int(b.rng.integers(2, 4))
    parts = [x] + [
        b.input(shape, "f32", b.operand_layout(i, rank, layout)) for i in range(1, count)
    ]
    split = {p.dim for p in layout if p.kind == "shard"}
    whole = [d for d in range(rank) if d not in split]
    dim = int(b.rng.choice(whole)) if whole and b.rng.random() < 0.8 else int(b.rng.integers(rank))
    return b.op("concatenate", tuple(parts), "f32", {"dim": dim})


def pad_widths(node) -> list[tuple[int, int, int]] | None:
    """A pad's (low, high, interior) per dim, as HLO writes them (`lo_hi[_interior]` per
    dim, `x` between dims); None for an attribute that does not spell one per dim."""
    try:
        widths = [
            tuple(int(n) for n in spec.split("_"))
            for spec in str(node.attrs.get("padding", "")).split("x")
        ]
    except ValueError:
        return None
    if len(widths) != len(node.shape) or any(len(w) not in (2, 3) for w in widths):
        return None
    return [(w[0], w[1], w[2] if len(w) == 3 else 0) for w in widths]


def one_dim_pad(node) -> tuple[int, int, int] | None:
    """(dim, low, high) of a pad that grows one dim only, with no interior padding and no
    crop; None for any other."""
    widths = pad_widths(node)
    grown = [d for d, w in enumerate(widths or ()) if any(w)]
    if widths is None or len(grown) != 1 or min(widths[grown[0]]) < 0 or widths[grown[0]][2]:
        return None
    (dim,) = grown
    return dim, widths[dim][0], widths[dim][1]


def _pad(node, args) -> np.ndarray:
    """HLO's `pad` without interior padding; negative widths crop."""
    x, value = args
    widths = pad_widths(node)
    if widths is None or any(w[2] for w in widths):
        raise NotSimulable("pad with interior padding, or widths that cannot be read")
    crop = tuple(slice(max(-w[0], 0), x.shape[d] - max(-w[1], 0)) for d, w in enumerate(widths))
    grow = [(max(w[0], 0), max(w[1], 0)) for w in widths]
    return np.pad(x[crop], grow, constant_values=np.asarray(value).reshape(()).item())


def _view_step(name: str, dim_map, generate) -> OpSpec:
    """A primitive reshape step (`merge` of dims p and p+1, `split` of dim p): keyed by the
    inner size alone, which a shard on the outer factor leaves unchanged."""
    return OpSpec(
        name,
        arity=(1,),
        attrs={"dim": "I", "inner": "I"},
        key=int_attrs_key("dim", "inner"),
        dim_map=dim_map,
        kernel=_reshape,
        generate=generate,
        scaling=TOGETHER,
    )


OPS = [
    OpSpec("parameter"),
    OpSpec("constant", kernel=_constant),
    OpSpec("iota", key=attrs_and_shape_key, kernel=_iota),
    OpSpec("opaque", key=attrs_and_shape_key, pure=False),
    OpSpec(
        "dot",
        arity=(2,),
        attrs={"lhs_batch": "S", "batch_out": "S"},
        key=_dot_key,
        dim_map=_dot_maps,
        kernel=_dot,
        generate=_dot_instance,
        check_types=_dot_types,
        scaling=EACH,
    ),
    OpSpec(
        "reduce",
        arity=(1, 2),
        attrs={"op": "S", "kept": "S", "kept_out": "S"},
        key=_reduce_key,
        dim_map=_reduce_maps,
        kernel=_reduce,
        generate=_reduce_instance,
        scaling=Scaling("together", when=("op", ("sum", "max", "min"))),
    ),
    OpSpec(
        "broadcast",
        arity=(1,),
        attrs={"dims": "S", "new_dim": "I"},
        engine_attrs={"new_size": "I", "new_rest": "S"},  # broadcast-block's, a new dim each
        key=_broadcast_key,
        dim_map=lambda node, shapes, out_rank: [list(node.attrs["dims"])],
        kernel=_broadcast,
        generate=_broadcast_instance,
        scaling=TOGETHER,
    ),
    OpSpec("reshape", arity=(1,), key=_reshape_key, kernel=_reshape),
    _view_step("merge", _merge_maps, _merge_instance),
    _view_step("split", _split_maps, _split_instance),
    OpSpec(
        "transpose",
        arity=(1,),
        key=lambda k, sig: [f"perm={ints(k.node.attrs['perm'])}"],
        dim_map=_transpose_maps,
        kernel=lambda node, args: np.transpose(args[0], node.attrs["perm"]),
        generate=_transpose_instance,
        scaling=TOGETHER,
    ),
    OpSpec(
        "slice",
        arity=(1,),
        attrs={"cut": "I", "start": "I", "limit": "I", "stride": "I"},
        key=_slice_key,
        dim_map=_slice_maps,
        kernel=_slice,
        generate=_slice_instance,
        scaling=TOGETHER,
    ),
    OpSpec(
        "concatenate",
        arity=(2, 3),
        attrs={"dim": "I"},
        key=int_attrs_key("dim"),
        dim_map=_concatenate_maps,
        kernel=lambda node, args: np.concatenate(args, axis=int(node.attrs["dim"])),
        generate=_concatenate_instance,
        scaling=TOGETHER,
    ),
    OpSpec("pad", arity=(2,), key=attrs_and_shape_key, kernel=_pad, scaling=TOGETHER),
]
