"""Layout relations between a distributed tensor and its baseline counterpart (design §3).

A layout is a sequence of placements, one per mesh axis that cuts or splits the tensor:
`shard(dim, axis)` (the device keeps block r of the dim) or `partial(op, axis)` (reducing over
the axis gives the baseline). No placement for an axis means the tensor is the same on every
device of it; the empty layout is `replicate`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

import numpy as np

from scalify.errors import ScalifyError
from scalify.mesh import Mesh


@dataclass(frozen=True, order=True)
class Placement:
    # "shard" | "partial" | "rescaled" (times exp(g - f) along dims `op`) | "log" (log of
    # the value plus a shift) | "normalised" (divided by a partial sum along dims `op`) |
    # "padded" (dim `dim` padded at its end to `size`; zeros in an input, unread in an
    # output; `op` "lowest": the padding holds the lowest value, a softmax's mask) |
    # "repeated" (each run of `unit` elements along `dim` repeated `size` times).
    # The last two have no axis: they say what value a later shard of the dim cuts.
    kind: str
    axis: str
    dim: int = -1
    op: str = "sum"
    # A shard of a dim made of parts (a fused [Wq|Wk|Wv] weight): sizes in baseline units;
    # the device holds its block of every part, in part order (Megatron's partition_stride,
    # DTensor's _StridedShard, here with unequal parts). Empty: one part, a plain shard.
    parts: tuple[int, ...] = ()
    # per part, the padded or repeated placements that make the value whose block a device
    # holds (empty, or one layout per part: a head count that does not divide by the axis)
    part_values: tuple[tuple[Placement, ...], ...] = ()
    size: int = 0
    unit: int = 1
    # kind "laid": a layout kind a rule file declares (`layout cyclic(d, a) = i * n + r`),
    # named by `op`; the index map says which place of the dim the device's place `i` holds.
    # Resolved from the rules (`resolve_declared`); not part of equality, so a layout read
    # back from the e-graph, which names the kind only, compares equal to a stated one.
    index_map: IndexMap | None = field(default=None, compare=False)

    def part_sizes(self) -> tuple[int, ...]:
        """The sizes of the parts' values, which the axis splits (baseline units)."""
        if not self.part_values:
            return self.parts
        return tuple(
            _value_size(size, self.dim, values)
            for size, values in zip(self.parts, self.part_values, strict=True)
        )

    def __str__(self) -> str:
        if self.kind == "padded":
            return f"padded({self.dim}, {self.size})"
        if self.kind == "repeated":
            unit = f", {self.unit}" if self.unit != 1 else ""
            return f"repeated({self.dim}, {self.size}{unit})"
        if self.kind == "shard" and self.parts:
            sizes = ", ".join(
                " ".join([str(size), *map(str, values)])
                for size, values in zip(
                    self.parts, self.part_values or [()] * len(self.parts), strict=True
                )
            )
            return f"shard({self.dim}, {self.axis}, parts=[{sizes}])"
        if self.kind == "shard":
            return f"shard({self.dim}, {self.axis})"
        if self.kind == "laid":
            return f"{self.op}({self.dim}, {self.axis})"
        if self.kind == "rescaled":
            return f"rescaled(exp(max - local max) along dims {self.op or 'none'})"
        if self.kind == "log":
            return "log(...) + max"
        if self.kind == "normalised":
            return f"normalised(by the local sum along dims {self.op or 'none'})"
        return f"partial({self.op}, {self.axis})"


Layout = tuple[Placement, ...]
REPLICATE: Layout = ()

# An index map of a declared layout kind: an int, a name (`i` the device's place along the
# dim, `r` its coordinate on the axis, `n` the axis's size, `size` the dim's global size), or
# (op, lhs, rhs) with op one of + - * / % (integer division and remainder).
IndexMap = int | str | tuple
INDEX_NAMES = ("i", "r", "n", "size")
_INDEX_OPS = {
    "+": np.add,
    "-": np.subtract,
    "*": np.multiply,
    "/": np.floor_divide,
    "%": np.remainder,
}


def held_places(index_map: IndexMap, coord: int, count: int, size: int) -> np.ndarray:
    """The places of a dim of `size` that device `coord` of `count` holds under a declared
    layout kind, in its local order (it holds `size / count` of them)."""
    names = {"i": np.arange(size // count), "r": coord, "n": count, "size": size}

    def value(expr: IndexMap):
        if isinstance(expr, str):
            return names[expr]
        if isinstance(expr, int):
            return expr
        op, lhs, rhs = expr
        with np.errstate(divide="ignore"):
            return _INDEX_OPS[op](value(lhs), value(rhs))

    return np.broadcast_to(np.asarray(value(index_map), dtype=np.int64), (size // count,))


def index_map_text(expr: IndexMap) -> str:
    """An index map as a rule file writes it, fully bracketed."""
    if isinstance(expr, tuple):
        op, lhs, rhs = expr
        return f"({index_map_text(lhs)} {op} {index_map_text(rhs)})"
    return str(expr)


def value_step(size: int, p: Placement) -> int:
    """A dim's size after a padded (to `p.size`) or repeated (`p.size` times) placement."""
    return p.size if p.kind == "padded" else size * p.size


def _value_size(size: int, dim: int, values: tuple[Placement, ...]) -> int:
    for p in values:
        if p.dim == dim:
            size = value_step(size, p)
    return size


_PLACEMENT = re.compile(
    r"\s*([A-Za-z_]\w*)\s*\(\s*([A-Za-z0-9_-]+)\s*,\s*([A-Za-z_]\w*)\s*"
    r"(?:,\s*parts\s*=\s*\[([^\]]*)\]\s*)?\)"
)
# padded(DIM, SIZE), repeated(DIM, TIMES[, UNIT]): the value a later shard of DIM cuts
_VALUE_LAYOUT = re.compile(r"\s*(padded|repeated)\s*\(\s*(\d+)\s*,\s*(\d+)\s*(?:,\s*(\d+)\s*)?\)")


def layout_str(layout: Layout) -> str:
    return " ".join(str(p) for p in layout) if layout else "replicate"


def canonical(layout: Layout) -> Layout:
    """The one order of `layout` that comparisons use: placements over different axes
    commute (a shard of one dim and a shard of another, a shard and a partial, two
    partials), but two shards of the same dim do not (the first one's blocks are the outer
    ones: device (i, j) of ("dp", "tp") holds block i*2+j under dp-then-tp, block j*2+i
    under tp-then-dp). So this is a sort that never swaps such a pair: repeatedly take the
    smallest placement that commutes with every one before it."""
    rest, ordered = list(layout), []
    while rest:
        movable = [i for i, p in enumerate(rest) if all(_commute(q, p) for q in rest[:i])]
        ordered.append(rest.pop(min(movable, key=lambda i: rest[i])))
    return tuple(ordered)


def _commute(p: Placement, q: Placement) -> bool:
    if p.axis == q.axis:
        return False
    return not (p.kind != "partial" and q.kind != "partial" and p.dim == q.dim)


def parse_layout(text: str, mesh: Mesh, where: str = "") -> Layout:
    """`replicate`, `shard(1, tp)`, `partial(sum, tp)` or several separated by spaces."""
    if text.strip() == "replicate":
        return REPLICATE
    placements = []
    pos = 0
    while pos < len(text.rstrip()):
        if value_match := _VALUE_LAYOUT.match(text, pos):
            placements.append(_value_placement(value_match, text, where))
            pos = value_match.end()
            continue
        match = _PLACEMENT.match(text, pos)
        if not match:
            raise ScalifyError(
                f"bad layout {text!r}: expected replicate, shard(DIM, AXIS), "
                "shard(DIM, AXIS, parts=[SIZE, ...]), partial(sum|max|min, AXIS), "
                "padded(DIM, SIZE), repeated(DIM, TIMES[, UNIT]) or a kind the rules declare, "
                "NAME(DIM, AXIS)",
                where,
            )
        kind, arg, axis, parts = match.groups()
        if axis not in mesh.names:
            raise ScalifyError(f"layout {text!r} names axis {axis!r}, not in mesh {mesh}", where)
        if kind == "shard":
            if not arg.isdigit():
                raise ScalifyError(
                    f"bad layout {text!r}: shard dim must be a non-negative integer", where
                )
            sizes, values = _parts(parts, text, where)
            placements.append(
                Placement("shard", axis, dim=int(arg), parts=sizes, part_values=values)
            )
        elif kind != "partial":  # a kind a rule file declares (checked by resolve_declared)
            if parts is not None or not arg.isdigit():
                raise ScalifyError(
                    f"bad layout {text!r}: a declared layout kind takes (DIM, AXIS)", where
                )
            placements.append(Placement("laid", axis, dim=int(arg), op=kind))
        else:
            if parts is not None:
                raise ScalifyError(f"bad layout {text!r}: only a shard has parts", where)
            if arg not in ("sum", "max", "min"):
                raise ScalifyError(f"bad layout {text!r}: partial op is sum, max or min", where)
            placements.append(Placement("partial", axis, op=arg))
        pos = match.end()
    return tuple(placements)


def _value_placement(match: re.Match, text: str, where: str) -> Placement:
    kind, dim, size, unit = match.groups()
    if kind == "padded" and unit is not None:
        raise ScalifyError(f"bad layout {text!r}: padded takes (DIM, SIZE)", where)
    if int(size) < 1 or (unit is not None and int(unit) < 1):
        raise ScalifyError(f"bad layout {text!r}: {kind} sizes are positive", where)
    if kind == "repeated" and int(size) < 2:
        raise ScalifyError(
            f"bad layout {text!r}: repeated(DIM, TIMES) repeats at least twice", where
        )
    return Placement(kind, "", dim=int(dim), size=int(size), unit=int(unit or 1))


def _parts(
    text: str | None, layout: str, where: str
) -> tuple[tuple[int, ...], tuple[tuple[Placement, ...], ...]]:
    """`parts=[SIZE [padded(..)|repeated(..)]..., ...]`: each part's size and value layouts."""
    if text is None:
        return (), ()
    entries = [e.strip() for e in _top_level_split(text) if e.strip()]
    sizes, values = [], []
    for entry in entries:
        head = re.match(r"(\d+)", entry)
        if head is None or int(head.group(1)) < 1:
            sizes = []
            break
        sizes.append(int(head.group(1)))
        rest, pos, found = entry[head.end() :], 0, []
        while pos < len(rest.rstrip()):
            match = _VALUE_LAYOUT.match(rest, pos)
            if match is None:
                raise ScalifyError(
                    f"bad layout {layout!r}: a part is SIZE followed by padded(DIM, SIZE) or "
                    f"repeated(DIM, TIMES[, UNIT]), not {entry!r}",
                    where,
                )
            found.append(_value_placement(match, layout, where))
            pos = match.end()
        values.append(tuple(found))
    if len(sizes) < 2 or len(sizes) != len(entries):
        raise ScalifyError(
            f"bad layout {layout!r}: parts=[...] lists two or more positive sizes", where
        )
    return tuple(sizes), (tuple(values) if any(values) else ())


def _top_level_split(text: str) -> list[str]:
    """`text` split at the commas outside parentheses."""
    pieces, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            pieces.append(text[start:i])
            start = i + 1
    return pieces + [text[start:]]


def local_shape(shape: tuple[int, ...], layout: Layout, mesh: Mesh) -> tuple[int, ...]:
    """The per-device shape of a tensor of global `shape` under `layout`."""
    local = list(shape)
    for p in layout:
        if p.kind == "shard" and p.part_values:
            local[p.dim] = sum(p.part_sizes()) // mesh.axis_size(p.axis)
        elif p.kind in ("shard", "laid"):
            local[p.dim] //= mesh.axis_size(p.axis)
        elif p.kind in ("padded", "repeated"):
            local[p.dim] = value_step(local[p.dim], p)
    return tuple(local)


def resolve_declared(layout: Layout, declared: dict[str, IndexMap], where: str = "") -> Layout:
    """`layout` with each declared kind's index map attached, from the rule set's `layout`
    declarations; a kind no rule file declares is an error naming the known ones."""
    resolved = []
    for p in layout:
        if p.kind == "laid":
            if p.op not in declared:
                known = ", ".join(sorted(declared)) or "none"
                raise ScalifyError(
                    f"layout kind `{p.op}` is not declared by the rules (declared: {known}); "
                    f"a rule file declares one as `layout {p.op}(d, a) = <index map>`",
                    where,
                )
            p = replace(p, index_map=declared[p.op])
        resolved.append(p)
    return tuple(resolved)
