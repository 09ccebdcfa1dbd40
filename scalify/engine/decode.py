"""Read what saturation proved: for each distributed node, its layouts over baseline nodes."""

from __future__ import annotations

from collections import defaultdict

from scalify.engine.egraph import EGraphSession
from scalify.layout import Layout, Placement


def read_proof(
    session: EGraphSession,
) -> tuple[dict[int, set[tuple[Layout, int]]], set[int], set[int]]:
    """What saturation established, from one snapshot of the e-graph: for each distributed
    node its layouts over baseline nodes (DistDesc), the nodes that are the same on every
    device (DistBase), and those that hold a block or partial sum of a value computable from
    baseline values (DistHeld)."""
    functions = session.frozen().functions
    replicated = {session.i64(row.inputs[0]) for row in functions["DistBase"].rows}
    held = {session.i64(row.inputs[0]) for row in functions["DistHeld"].rows}
    return _relations(session, functions), replicated, held


def _relations(session: EGraphSession, functions) -> dict[int, set[tuple[Layout, int]]]:
    layouts: dict = {}
    for row in functions["LNil"].rows:
        layouts[row.output] = ("nil",)
    pending = {}
    # (dim or op, axis, the rest of the layout): a shard's first field is a dim, a partial's an op
    for function, kind, first in (
        ("LShard", "shard", session.i64),
        ("LPartial", "partial", session.string),
    ):
        for row in functions[function].rows:
            dim_or_op, axis, rest = row.inputs[:3]
            pending[row.output] = (kind, first(dim_or_op), session.string(axis), rest)
    for row in functions["LRescaled"].rows:
        pending[row.output] = ("rescaled", session.string(row.inputs[0]), "", row.inputs[1])
    for row in functions["LLog"].rows:
        pending[row.output] = ("log", "", "", row.inputs[0])
    for row in functions["LRatio"].rows:
        pending[row.output] = ("normalised", session.string(row.inputs[0]), "", row.inputs[1])
    for row in functions["LPadded"].rows:
        dim, size = (session.i64(v) for v in row.inputs[:2])
        pending[row.output] = ("padded", dim, (size, 1), row.inputs[2])
    for row in functions["LLaid"].rows:
        kind, dim, axis = session.string(row.inputs[0]), session.i64(row.inputs[1]), row.inputs[2]
        pending[row.output] = ("laid", dim, (kind, session.string(axis)), row.inputs[3])
    for row in functions["LRepeated"].rows:
        dim, times, unit = (session.i64(v) for v in row.inputs[:3])
        pending[row.output] = ("repeated", dim, (times, unit), row.inputs[3])

    def decode(value, depth: int = 0) -> Layout:
        if value in layouts and layouts[value] == ("nil",):
            return ()
        kind, a, b, rest = pending[value]
        inner = decode(rest, depth + 1)
        if kind == "shard":
            return inner + (Placement("shard", b, dim=a),)
        if kind == "laid":  # the kind's index map is attached where the rules are at hand
            return inner + (Placement("laid", b[1], dim=a, op=b[0]),)
        if kind in ("padded", "repeated"):
            return inner + (Placement(kind, "", dim=a, size=b[0], unit=b[1]),)
        if kind in ("rescaled", "log", "normalised"):
            return inner + (Placement(kind, "", op=a),)
        return inner + (Placement("partial", b, op=a),)

    result: dict[int, set[tuple[Layout, int]]] = defaultdict(set)
    for row in functions["DistDesc"].rows:
        dist_id = session.i64(row.inputs[0])
        base_id = session.i64(row.inputs[2])
        result[dist_id].add((decode(row.inputs[1]), base_id))
    return result
