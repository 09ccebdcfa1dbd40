"""A device's coordinate on a mesh axis as XLA writes it, `(partition id / stride) % size`
(then converted to the index dtype): the one spelling the rules read as `coord(axis)`
(`axis_coordinate` in rules/tp.srl). Frontends, passes and the fuzzer that make a
coordinate emit it here."""

from __future__ import annotations

from scalify.ops.one_hot_forms import Emit


def device_coordinate(emit: Emit, size: int, stride: int, dtype: str) -> int:
    """The coordinate on an axis of `size` devices whose neighbours are `stride` device ids
    apart, as a `dtype` scalar; returns the id of its last node."""
    pid = emit("rank_index", (), (), "u32", {"kind": "partition"})
    by = emit("constant", (), (), "u32", {"value": str(stride)})
    count = emit("constant", (), (), "u32", {"value": str(size)})
    coord = emit("rem", (emit("div", (pid, by), (), "u32", {}), count), (), "u32", {})
    return emit("convert", (coord,), (), dtype, {"dtype": dtype})
