"""Layout relations between a distributed tensor and its baseline counterpart (design §3).

A layout is a sequence of placements, one per mesh axis that cuts or splits the tensor:
`shard(dim, axis)` (the device keeps block r of the dim) or `partial(op, axis)` (reducing over
the axis gives the baseline). No placement for an axis means the tensor is the same on every
device of it; the empty layout is `replicate`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import ScalifyError
from .mesh import Mesh


@dataclass(frozen=True, order=True)
class Placement:
    # "shard" | "partial" | "rescaled" (times exp(g - f) along dims `op`) | "log" (log of
    # the value plus a shift) | "normalised" (divided by a partial sum along dims `op`)
    kind: str
    axis: str
    dim: int = -1
    op: str = "sum"
    # A shard of a dim made of parts (a fused [Wq|Wk|Wv] weight): sizes in baseline units;
    # the device holds its block of every part, in part order (Megatron's partition_stride,
    # DTensor's _StridedShard, here with unequal parts). Empty: one part, a plain shard.
    parts: tuple[int, ...] = ()

    def __str__(self) -> str:
        if self.kind == "shard" and self.parts:
            sizes = ", ".join(map(str, self.parts))
            return f"shard({self.dim}, {self.axis}, parts=[{sizes}])"
        if self.kind == "shard":
            return f"shard({self.dim}, {self.axis})"
        if self.kind == "rescaled":
            return f"rescaled(exp(max - local max) along dims {self.op or 'none'})"
        if self.kind == "log":
            return "log(...) + max"
        if self.kind == "normalised":
            return f"normalised(by the local sum along dims {self.op or 'none'})"
        return f"partial({self.op}, {self.axis})"


Layout = tuple[Placement, ...]
REPLICATE: Layout = ()

_PLACEMENT = re.compile(
    r"\s*(shard|partial)\s*\(\s*([A-Za-z0-9_-]+)\s*,\s*([A-Za-z_]\w*)\s*"
    r"(?:,\s*parts\s*=\s*\[([^\]]*)\]\s*)?\)"
)


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
        match = _PLACEMENT.match(text, pos)
        if not match:
            raise ScalifyError(
                f"bad layout {text!r}: expected replicate, shard(DIM, AXIS), "
                "shard(DIM, AXIS, parts=[SIZE, ...]) or partial(sum|max|min, AXIS)",
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
            placements.append(
                Placement("shard", axis, dim=int(arg), parts=_parts(parts, text, where))
            )
        else:
            if parts is not None:
                raise ScalifyError(f"bad layout {text!r}: only a shard has parts", where)
            if arg not in ("sum", "max", "min"):
                raise ScalifyError(f"bad layout {text!r}: partial op is sum, max or min", where)
            placements.append(Placement("partial", axis, op=arg))
        pos = match.end()
    return tuple(placements)


def _parts(text: str | None, layout: str, where: str) -> tuple[int, ...]:
    if text is None:
        return ()
    sizes = [t.strip() for t in text.split(",") if t.strip()]
    if len(sizes) < 2 or not all(t.isdigit() and int(t) > 0 for t in sizes):
        raise ScalifyError(
            f"bad layout {layout!r}: parts=[...] lists two or more positive sizes", where
        )
    return tuple(int(t) for t in sizes)


def local_shape(shape: tuple[int, ...], layout: Layout, mesh: Mesh) -> tuple[int, ...]:
    """The per-device shape of a tensor of global `shape` under `layout`."""
    local = list(shape)
    for p in layout:
        if p.kind == "shard":
            local[p.dim] //= mesh.axis_size(p.axis)
    return tuple(local)
