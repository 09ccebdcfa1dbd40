"""Readers of HLO attribute text: replica groups and device meshes, shardings, slices,
metadata and source locations, literals, gather and scatter dimension numbers. Each is small
and reads only what Scalify needs."""

from __future__ import annotations

import math
import re
from typing import Any, TypeVar

from scalify.frontends.frames import pick_location
from scalify.frontends.hlo_syntax import (
    _Array,
    _Shape,
)
from scalify.ir import Node, SourceLoc, TileSharding

# --------------------------------------------------------------------------------------------
# Attribute parsers (small and dedicated, on raw attribute text)

T = TypeVar("T")

_COMMENT_RE = re.compile(r"/\*.*?\*/")
_INT_RE = re.compile(r"-?\d+")
_IOTA_RE = re.compile(r"\[([\d,\s]*)\]\s*<=\s*\[([\d,\s]*)\](?:\s*T\(([\d,\s]*)\))?")


def _ints(raw: str) -> tuple[int, ...]:
    """`{1,0}` -> (1, 0); `{}` -> (); a bare `3` -> (3,)."""
    return tuple(int(x) for x in _INT_RE.findall(raw))


def _int_list(text: str) -> list[int]:
    return [int(x) for x in _INT_RE.findall(text)]


def _iota_groups(m: re.Match[str]) -> list[list[int]]:
    """Expand an iota device list `[G,S]<=[d0,d1,..]T(p..)`: iota(prod(d)) reshaped to d,
    transposed by p, flattened, then reshaped to [G, S] (only its last dim splits groups)."""
    shape = _int_list(m.group(1))
    flat = _iota_devices(m.group(2), m.group(3))
    if math.prod(shape) != len(flat):
        raise ValueError(f"inconsistent iota device list '{m.group(0)}'")
    width = shape[-1] if shape else 1
    return [flat[i : i + width] for i in range(0, len(flat), width)]


def _iota_devices(dims_text: str, perm_text: str | None, whole: int = 0) -> list[int]:
    """iota(prod(dims)) reshaped to `dims`, transposed by `perm` (none: kept), flattened;
    `whole`: the devices there must be (and the dims when none are listed)."""
    dims = _int_list(dims_text) or ([whole] if whole else [])
    perm = _int_list(perm_text) if perm_text is not None else list(range(len(dims)))
    if whole and math.prod(dims) != whole:
        raise ValueError(f"device list [{dims_text}] does not hold {whole} devices")
    if sorted(perm) != list(range(len(dims))):
        raise ValueError(f"bad transpose {perm} for dims {dims}")
    strides = [math.prod(dims[i + 1 :]) for i in range(len(dims))]
    flat: list[int] = [0]
    for p in perm:
        flat = [base + k * strides[p] for base in flat for k in range(dims[p])]
    return flat


def _groups(raw: str) -> tuple[tuple[int, ...], ...]:
    """Replica groups: `{{0,1},{2,3}}`, `{}` (all devices -> ()), the iota form, or the
    mesh-axes form."""
    raw = _COMMENT_RE.sub("", raw).strip()
    m = _IOTA_RE.fullmatch(raw)
    if m is not None:
        return tuple(tuple(g) for g in _iota_groups(m))
    if raw.startswith("mesh["):
        return _mesh_groups(raw)
    groups = [tuple(_int_list(g)) for g in re.findall(r"\{([^{}]*)\}", raw[1:-1])]
    if all(not g for g in groups):
        return ()
    return tuple(groups)


_MESH_GROUPS_RE = re.compile(
    r"mesh\[([^\[\]]*)\](?:\s*,\s*device_ids=\((.*)\))?\s*\{([^{}]*)\}", re.S
)
_MESH_AXIS_RE = re.compile(r"\s*'?([^'=:(),]+?)'?\s*(?::\((\d+)\)(\d+))?\s*")
_DEVICE_IOTA_RE = re.compile(r"\s*\[([\d,\s]*)\]\s*(?:T\(([\d,\s]*)\))?\s*")


def _mesh_groups(raw: str) -> tuple[tuple[int, ...], ...]:
    """`mesh['x'=2,'y'=4] {'x'}`: devices that agree on every mesh coordinate outside the
    listed axes form a group, ordered by the listed axes (first = most significant). The
    mesh holds iota(n) unless `device_ids=(...)` gives an iota `[dims]T(perm)` or a list.
    A listed sub-axis `'x':(pre)size` is the digit `(i // pre) % size` of coordinate i."""
    m = _MESH_GROUPS_RE.fullmatch(raw)
    if m is None:
        raise ValueError(f"cannot read mesh replica groups '{raw}'")
    names, sizes = [], []
    for part in _split_top(m.group(1)):
        name, _, size = part.rpartition("=")
        names.append(name.strip().strip("'\""))
        sizes.append(int(size))
    total = math.prod(sizes)
    devices = list(range(total))
    if m.group(2) is not None:
        iota = _DEVICE_IOTA_RE.fullmatch(m.group(2))
        if iota is not None:
            devices = _iota_devices(iota.group(1), iota.group(2) or None)
        else:
            devices = _int_list(m.group(2))
        if len(devices) != total:
            raise ValueError(f"device_ids do not fill the mesh in '{raw}'")
    refs: list[tuple[int, int, int]] = []  # (mesh axis, pre, size)
    for part in _split_top(m.group(3)):
        am = _MESH_AXIS_RE.fullmatch(part)
        if am is None or am.group(1) not in names:
            raise ValueError(f"unknown mesh axis '{part}' in '{raw}'")
        axis = names.index(am.group(1))
        pre, size = (int(am.group(2)), int(am.group(3))) if am.group(2) else (1, sizes[axis])
        refs.append((axis, pre, size))
    strides = [math.prod(sizes[i + 1 :]) for i in range(len(sizes))]
    groups: dict[tuple[int, ...], list[tuple[int, int]]] = {}
    for pos in range(total):
        coords = [(pos // strides[i]) % sizes[i] for i in range(len(sizes))]
        ordinal = 0
        for axis, pre, size in refs:
            ordinal = ordinal * size + (coords[axis] // pre) % size
        rest = list(coords)
        for axis, pre, size in sorted(refs, key=lambda r: -r[1]):
            r = rest[axis]
            rest[axis] = (r // (pre * size)) * pre + r % pre
        groups.setdefault(tuple(rest), []).append((ordinal, devices[pos]))
    return tuple(tuple(d for _, d in sorted(g)) for _, g in sorted(groups.items()))


def _pairs(raw: str) -> tuple[tuple[int, int], ...]:
    """`source_target_pairs={{0,1},{1,2}}` -> ((0, 1), (1, 2))."""
    out = []
    inner = raw[1:-1] if raw.startswith("{") else raw
    for g in re.findall(r"\{([^{}]*)\}", inner):
        ints = _int_list(g)
        if len(ints) != 2:
            raise ValueError(f"bad source/target pair '{{{g}}}'")
        out.append((ints[0], ints[1]))
    if not out and inner.strip():
        raise ValueError(f"source_target_pairs {raw!r} lists no pair: expected {{{{0,1}},...}}")
    return tuple(out)


_SLICE_RE = re.compile(r"\[\s*(-?\d+)\s*:\s*(-?\d+)\s*(?::\s*(-?\d+)\s*)?\]")


def _slice(raw: str) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    starts, limits, strides = [], [], []
    for m in _SLICE_RE.finditer(raw):
        starts.append(int(m.group(1)))
        limits.append(int(m.group(2)))
        strides.append(int(m.group(3)) if m.group(3) is not None else 1)
    return tuple(starts), tuple(limits), tuple(strides)


def _unquote(raw: str) -> str:
    """The content of an HLO string literal (C escapes for quotes and backslashes)."""
    raw = raw.strip()
    if len(raw) >= 2 and raw[0] == '"' and raw[-1] == '"':
        raw = raw[1:-1]
    return re.sub(r"\\(.)", r"\1", raw)


def _split_top(text: str, sep: str = ",") -> list[str]:
    """Split on `sep` outside brackets, braces, parentheses and strings."""
    parts, depth, start, i, n = [], 0, 0, 0, len(text)
    while i < n:
        ch = text[i]
        if ch == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
        elif ch in "{[(":
            depth += 1
        elif ch in "}])":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
        i += 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _hlo_sharding(raw: str, shape: _Shape) -> list[TileSharding | None]:
    """An HLO `sharding=` value as one TileSharding (or None) per leaf of `shape`.

    `{devices=[2,1,4]<=[8] last_tile_dim_replicate}` -> tiles (2, 1); `last_tile_dims={..}` drops
    as many trailing dims; `{replicated}` -> all ones. Maximal/manual/unknown give None. A tuple
    sharding lists the leaves' shardings in order.
    """
    leaves = _leaves(shape, _Array)
    text = _COMMENT_RE.sub("", raw).strip()
    if text.startswith("{"):
        text = text[1:-1].strip()
    if text.startswith("{"):
        elements = _split_top(text)
        if len(elements) != len(leaves):
            return [None] * len(leaves)
        return [
            _one_sharding(e[1:-1].strip(), leaf) for e, leaf in zip(elements, leaves, strict=True)
        ]
    return [_one_sharding(text, leaf) for leaf in leaves]


def _one_sharding(text: str, leaf: _Array) -> TileSharding | None:
    if text.startswith("replicated"):
        return TileSharding(tiles=(1,) * len(leaf.dims), replicated=True)
    m = re.match(r"devices=\[([\d,\s]*)\]", text)
    if m is None:
        return None
    tiles = _int_list(m.group(1))
    devices = _tile_devices(text[m.end() :], tiles)
    all_tiles = tuple(tiles)
    if "last_tile_dim_replicate" in text:
        tiles = tiles[:-1]
    else:
        sub = re.search(r"last_tile_dims=\{([^{}]*)\}", text)
        if sub is not None:
            tiles = tiles[: len(tiles) - len(_split_top(sub.group(1)))]
    if len(tiles) != len(leaf.dims):
        return None
    return TileSharding(
        tiles=tuple(tiles),
        replicated=all(t == 1 for t in tiles),
        devices=devices,
        device_grid=all_tiles,
    )


def _tile_devices(rest: str, tiles: list[int]) -> tuple[int, ...] | None:
    """The device of each tile, in row-major tile order: `<=[8]`, `<=[2,4]T(1,0)` or an
    explicit list `0,1,2,3`."""
    total = math.prod(tiles)
    m = re.match(r"\s*<=\s*\[([\d,\s]*)\](?:\s*T\(([\d,\s]*)\))?", rest)
    if m:
        return tuple(_iota_devices(m.group(1), m.group(2) or None, total))
    m = re.match(r"\s*([\d,\s]+)", rest)
    if m:
        ids = _int_list(m.group(1))
        return tuple(ids) if len(ids) == total else None
    return None


_SDY_DIMS_RE = re.compile(
    r"<\s*(?:@[\w.\-]+|#?sdy\.mesh<[^>]*>|mesh<[^>]*>)\s*,\s*"
    r"\[((?:\s*\{[^{}]*\}(?:p\d+)?\s*,?)*)\]"
)
_SDY_AXIS_RE = re.compile(r'"([^"]*)"((?::\(\d+\)\d+)?)')


def _sdy_shardings(raw: str) -> list[tuple[tuple[str, ...], ...]]:
    """Mesh axes per dim for each value of a Shardy sharding (per-value list or single):
    `#sdy.sharding_per_value<[<@mesh, [{}, {"tp"}]>]>` -> [((), ("tp",))]. Sub-axes keep their
    `:(k)n` suffix in the axis name."""
    text = _unquote(raw)
    out = []
    for m in _SDY_DIMS_RE.finditer(text):
        dims = re.findall(r"\{([^{}]*)\}", m.group(1))
        out.append(tuple(tuple(a + s for a, s in _SDY_AXIS_RE.findall(d)) for d in dims))
    return out


def _mesh_hint(raw: str) -> dict[str, int]:
    """Axis sizes of the first non-empty `#sdy.mesh<[...]>` in `xla.sdy.meshes`."""
    text = _unquote(raw) if raw.lstrip().startswith('"') else raw.replace('\\"', '"')
    for m in re.finditer(r"sdy\.mesh<\[([^\]]*)\]", text):
        axes = re.findall(r'"([^"]+)"\s*=\s*(\d+)', m.group(1))
        if axes:
            return {name: int(size) for name, size in axes}
    return {}


def _frontend_attr(raw: str, key: str) -> str | None:
    """One entry of a `frontend_attributes={k=v,...}` value, raw."""
    text = raw.strip()
    if text.startswith("{"):
        text = text[1:-1]
    for part in _split_top(text):
        name, _, value = part.partition("=")
        if name.strip() == key:
            return value.strip()
    return None


_META_RE = re.compile(r'([\w.\-]+)=("(?:[^"\\]|\\.)*"|[^\s}]+)')


_STACK_FRAME_RE = re.compile(r"""['"]([^'"]+?):(\d+)['"]""")


def _stack_in_source_file(source_file: str) -> SourceLoc | None:
    """The op's place when `source_file` holds the whole Python stack as a quoted list of
    `'file:line'`, outermost first (torch-neuronx writes `<driver>\\n----\\n[...]` there,
    with the driver's line as `source_line` for every op); None for a plain file name."""
    start = source_file.find("[")
    if start < 0 or not source_file.rstrip().endswith("]"):
        return None
    frames = [SourceLoc(f, int(n)) for f, n in _STACK_FRAME_RE.findall(source_file[start:])]
    return pick_location(list(reversed(frames)))


def _metadata(raw: str) -> dict[str, str]:
    return {k: _unquote(v) if v.startswith('"') else v for k, v in _META_RE.findall(raw)}


def _literal(raw: str) -> str:
    """Canonical constant text: whitespace and comments removed, old `f32[2] {..}` prefix
    dropped: `0.5`, `-inf`, `{8}`, `{{1,2},{3,4}}`."""
    text = _COMMENT_RE.sub("", raw).strip()
    m = re.match(r"[a-z][a-z0-9]*\[[^\]]*\](?:\{[^{}\s]*\})?\s+", text)
    if m is not None:
        text = text[m.end() :]
    return re.sub(r"\s+", "", text)


_GATHER_FIELDS = (
    "offset_dims",
    "collapsed_slice_dims",
    "start_index_map",
    "index_vector_dim",
    "slice_sizes",
    "operand_batching_dims",
    "start_indices_batching_dims",
)


_SCATTER_FIELDS = (
    "update_window_dims",
    "inserted_window_dims",
    "scatter_dims_to_operand_dims",
    "index_vector_dim",
    "input_batching_dims",
    "scatter_indices_batching_dims",
)


def _rows_added_form(
    attrs: dict[str, Any],
    operand: tuple[int, ...],
    index: tuple[int, ...],
    updates: tuple[int, ...],
) -> int | None:
    """k when a scatter writes whole rows of its operand (dim 0), one per entry of k index
    dims (the index vector, of one entry, last or absent): the updates are those k dims then
    a whole row. None for any other scatter."""
    vector = attrs["index_vector_dim"]
    k = len(index) - (1 if vector < len(index) else 0)
    if vector < len(index) and (vector != len(index) - 1 or index[vector] != 1):
        return None
    rows = (
        attrs["inserted_window_dims"] == (0,)
        and attrs["scatter_dims_to_operand_dims"] == (0,)
        and not attrs["input_batching_dims"]
        and not attrs["scatter_indices_batching_dims"]
        and attrs["update_window_dims"] == tuple(range(k, k + len(operand) - 1))
        and tuple(updates) == (*index[:k], *operand[1:])
    )
    return k if rows and len(operand) >= 1 else None


def _vector_dim(given: tuple[int, ...], index: tuple[int, ...]) -> int:
    """HLO's index_vector_dim (default: past the last dim), checked against the indices."""
    vector_dim = given[0] if given else len(index)
    if not 0 <= vector_dim <= len(index):
        raise ValueError(
            f"index_vector_dim={vector_dim} is not a dim of the {len(index)}-dim indices "
            f"(expected 0..{len(index)})"
        )
    return vector_dim


def _unit_windows_as_batch(
    f: dict[str, tuple[int, ...]],
    table: tuple[int, ...],
    index: tuple[int, ...],
    out: tuple[int, ...],
) -> tuple[dict[str, tuple[int, ...]], tuple[int, ...]]:
    """The gather with every unit window dim of the table made a batching dim, and the
    indices' shape with the unit dim that pairs with it. JAX writes a dim of size 1 as a
    window (a one-group shard of a vmapped gather) where the whole dim is a batching dim;
    both take the same single entry, and only the batching form is one op with the other."""
    kept = set(f["collapsed_slice_dims"]) | set(f["operand_batching_dims"])
    windows = [d for d in range(len(table)) if d not in kept]
    if len(windows) != len(f["offset_dims"]) or len(out) != len(index) - (
        f["index_vector_dim"][0] < len(index)
    ) + len(windows):
        return f, index
    f = dict(f)
    index_shape = list(index)
    for d in [w for w in windows if table[w] == 1 and f["slice_sizes"][w] == 1]:
        windows = [w for w in range(len(table)) if w not in kept]
        position = f["offset_dims"][windows.index(d)]  # where the unit dim is in the output
        batch_out = [p for p in range(len(out)) if p not in f["offset_dims"]]
        vector = f["index_vector_dim"][0]
        index_dims = [e for e in range(len(index_shape)) if e != vector]
        rank = sum(p < position for p in batch_out)  # its place among the index dims
        new = index_dims[rank] if rank < len(index_dims) else len(index_shape)
        if rank == len(index_dims) and vector < len(index_shape):
            new = vector if vector > (index_dims[-1] if index_dims else -1) else new
        index_shape.insert(new, 1)

        def moved(e: int, new: int = new) -> int:
            return e + (e >= new)

        f["index_vector_dim"] = (moved(vector) if vector < len(index_shape) - 1 else vector + 1,)
        f["start_indices_batching_dims"] = (
            *(moved(e) for e in f["start_indices_batching_dims"]),
            new,
        )
        f["operand_batching_dims"] = (*f["operand_batching_dims"], d)
        f["offset_dims"] = tuple(p for p in f["offset_dims"] if p != position)
        kept.add(d)
    pairs = sorted(zip(f["operand_batching_dims"], f["start_indices_batching_dims"], strict=True))
    f["operand_batching_dims"] = tuple(d for d, _ in pairs)
    f["start_indices_batching_dims"] = tuple(e for _, e in pairs)
    return f, tuple(index_shape)


def _check_batching(
    operand_dims: tuple[int, ...], index_dims: tuple[int, ...], operand_rank: int, index_rank: int
) -> None:
    """Batching dims come in pairs, each a dim of the operand and of the indices."""
    if len(operand_dims) != len(index_dims):
        raise ValueError(
            f"{len(operand_dims)} operand batching dims but {len(index_dims)} indices batching "
            "dims (expected one of each per pair)"
        )
    for dims, rank, what in (
        (operand_dims, operand_rank, "operand"),
        (index_dims, index_rank, "indices"),
    ):
        if any(not 0 <= d < rank for d in dims):
            raise ValueError(
                f"{what} batching dims {list(dims)} are not dims of the {rank}-dim {what} "
                f"(expected 0..{rank - 1})"
            )


def _gather_form(
    f: dict[str, tuple[int, ...]],
    table: tuple[int, ...],
    index: tuple[int, ...],
    out: tuple[int, ...],
) -> tuple[str, int, tuple[int, ...], tuple[int, ...] | None] | None:
    """(op, dim, index shape without its vector dim, transpose to HLO's order or None) of a
    gather that is a `take` or a `take_along`, else None."""
    if len(f["start_index_map"]) != 1 or f["collapsed_slice_dims"] != f["start_index_map"]:
        return None
    (dim,) = f["start_index_map"]
    vector_dim = _vector_dim(f["index_vector_dim"], index)
    if vector_dim == len(index):
        batch_shape = index
    elif vector_dim == len(index) - 1 and index[-1] == 1:
        batch_shape = index[:-1]
    else:
        return None
    others = [e for e in range(len(table)) if e != dim]
    if not f["operand_batching_dims"]:  # take: whole slices
        if f["start_indices_batching_dims"] or list(f["slice_sizes"]) != [
            1 if e == dim else n for e, n in enumerate(table)
        ]:
            return None
        offsets = list(f["offset_dims"])
        if len(offsets) != len(others) or len(out) != len(batch_shape) + len(others):
            return None
        batch_positions = [p for p in range(len(out)) if p not in offsets]
        perm = tuple(
            len(batch_shape) + offsets.index(p) if p in offsets else batch_positions.index(p)
            for p in range(len(out))
        )
        return "take", dim, batch_shape, None if perm == tuple(range(len(out))) else perm
    if (  # take_along: one entry per row, every other dim a batch dim of both
        list(f["operand_batching_dims"]) != others
        or list(f["start_indices_batching_dims"]) != others
        or f["offset_dims"]
        or any(n != 1 for n in f["slice_sizes"])
        or len(batch_shape) != len(table)
        or tuple(out) != tuple(batch_shape)
        or any(batch_shape[e] != table[e] for e in others)
    ):
        return None
    return "take_along", dim, batch_shape, None


def _literal_number(text: str) -> float | None:
    low = text.lower()
    if low == "true":
        return 1.0
    if low == "false":
        return 0.0
    try:
        return float(low)
    except ValueError:
        try:
            return float.fromhex(low)
        except ValueError:
            return None


_FLOAT_MAX = {
    "f16": 65504.0,
    "bf16": 3.3895313892515355e38,
    "f32": 3.4028234663852886e38,
    "f64": 1.7976931348623157e308,
    "f8e4m3fn": 448.0,
    "f8e4m3": 240.0,
    "f8e5m2": 57344.0,
    "f8e4m3fnuz": 240.0,
    "f8e5m2fnuz": 57344.0,
    "f8e4m3b11fnuz": 30.0,
}


def _dtype_range(dtype: str) -> tuple[float, float] | None:
    """(lowest, highest) finite value of a dtype, when known."""
    if dtype in _FLOAT_MAX:
        return -_FLOAT_MAX[dtype], _FLOAT_MAX[dtype]
    if dtype == "pred":
        return 0.0, 1.0
    m = re.fullmatch(r"([su])(\d+)", dtype)
    if m is not None:
        bits = int(m.group(2))
        if m.group(1) == "s":
            return float(-(2 ** (bits - 1))), float(2 ** (bits - 1) - 1)
        return 0.0, float(2**bits - 1)
    return None


def _is_identity(node: Node, op: str) -> bool:
    """Whether `node` is a scalar constant equal to the identity of reducer `op`."""
    if node.op != "constant" or node.shape != ():
        return False
    value = _literal_number(str(node.attrs.get("value", "")))
    if value is None or math.isnan(value):
        return False
    if op == "sum":
        return value == 0
    if op == "prod":
        return value == 1
    if op in ("and", "or"):
        return value == (1 if op == "and" else 0)
    bounds = _dtype_range(node.dtype)
    if op == "max":
        return value == -math.inf or (bounds is not None and _close(value, bounds[0]))
    if op == "min":
        return value == math.inf or (bounds is not None and _close(value, bounds[1]))
    return False


def _close(a: float, b: float) -> bool:
    return a == b or (math.isfinite(a) and math.isclose(a, b, rel_tol=1e-6))


def _leaves(tree: Any, leaf: type[T]) -> list[T]:
    """The leaves of a nested tuple in order: a tuple shape's arrays, a tuple value's ids."""
    if isinstance(tree, leaf):
        return [tree]
    return [x for part in tree for x in _leaves(part, leaf)]
