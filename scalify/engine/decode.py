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
    i64, string = session.i64, session.string
    nil = {row.output for row in functions["LNil"].rows}
    last: dict = {}  # each layout value -> its last placement and the layout before it
    for row in functions["LShard"].rows:
        dim, axis, rest = row.inputs[:3]
        last[row.output] = (Placement("shard", string(axis), dim=i64(dim)), rest)
    for row in functions["LPartial"].rows:
        op, axis, rest = row.inputs[:3]
        last[row.output] = (Placement("partial", string(axis), op=string(op)), rest)
    for function, kind in (("LRescaled", "rescaled"), ("LRatio", "normalised")):
        for row in functions[function].rows:
            last[row.output] = (Placement(kind, "", op=string(row.inputs[0])), row.inputs[1])
    for row in functions["LLog"].rows:
        last[row.output] = (Placement("log", "", op=""), row.inputs[0])
    for row in functions["LPadded"].rows:
        dim, size = (i64(v) for v in row.inputs[:2])
        last[row.output] = (Placement("padded", "", dim=dim, size=size), row.inputs[2])
    for row in functions["LLaid"].rows:  # the index map is attached where the rules are
        kind, dim, axis, rest = row.inputs[:4]
        last[row.output] = (Placement("laid", string(axis), dim=i64(dim), op=string(kind)), rest)
    for row in functions["LRepeated"].rows:
        dim, times, unit = (i64(v) for v in row.inputs[:3])
        placement = Placement("repeated", "", dim=dim, size=times, unit=unit)
        last[row.output] = (placement, row.inputs[3])

    def decode(value) -> Layout:
        if value in nil:
            return ()
        placement, rest = last[value]
        return (*decode(rest), placement)

    result: dict[int, set[tuple[Layout, int]]] = defaultdict(set)
    for row in functions["DistDesc"].rows:
        result[i64(row.inputs[0])].add((decode(row.inputs[1]), i64(row.inputs[2])))
    return result
