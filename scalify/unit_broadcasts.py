"""A value with size-1 dims, read also as the broadcast of its squeezed self (an equal form,
derived when a distributed graph is proved).

A dim split over the devices down to one entry each (one KV head per device) loses its
broadcasts: where the baseline broadcasts RoPE's `cos` across the heads
(`broadcast(squeeze(cos))`), XLA's partitioner leaves each device `cos` itself, whose head
dim already has the one entry the device needs. Each such value used by an elementwise op
gets the identical form `broadcast(squeeze(v))` back, to its own shape, in an equal form of
that op: the broadcast's term is the baseline's broadcast term when the op's other operand
fixes the sizes, so the rules see a broadcast along a new dim (`spread`) as they do when the
broadcast is written out.
"""

from __future__ import annotations

from dataclasses import replace

from .canonicalize import _decompose_reshape
from .engine.encode import UNIT_TWINS
from .ir import Graph, Node, place_after
from .ops import ELEMENTWISE

SKIPPED = frozenset({"parameter", "constant", "iota", "broadcast"})


def with_unit_broadcast_forms(graph: Graph) -> Graph:
    """A copy of `graph` where each elementwise op over a value with size-1 dims (and
    others) has an equal form over `broadcast(squeeze(value))` instead, placed right after
    it. The form goes to the op, not to the value: a value's other users (a transpose, a
    merge) would pin the broadcast's sizes, and only elementwise users leave them free."""
    copy = replace(graph, nodes=dict(graph.nodes), equalities=list(graph.equalities), derived={})
    next_id = max(copy.nodes, default=-1) + 1
    forms: dict[int, int] = {}  # value -> its broadcast form
    placed: dict[int, list[int]] = {}
    twins: dict[int, int] = {}  # twin -> the broadcast form it reads
    for node in list(graph.nodes.values()):
        if node.op not in ELEMENTWISE or len(node.operands) < 2:
            continue
        added: list[int] = []
        for k, operand in enumerate(node.operands):
            if not _candidate(graph.node(operand)):
                continue
            if operand not in forms:
                ids, next_id = _broadcast_form(copy, graph.node(operand), next_id)
                forms[operand] = ids[-1]
                added += ids
            # one operand at a time: the others keep the sizes that anchor the broadcast
            operands = list(node.operands)
            operands[k] = forms[operand]
            twin = replace(node, id=next_id, operands=tuple(operands), name=f"{node.name}.unit")
            copy.nodes[twin.id] = twin
            next_id += 1
            copy.equalities.append((node.id, twin.id))
            added.append(twin.id)
            twins[twin.id] = forms[operand]
        if added:
            placed[node.id] = added
    place_after(copy, placed)
    if twins:
        copy.derived[UNIT_TWINS] = twins
    return copy


def _broadcast_form(graph: Graph, value: Node, next_id: int) -> tuple[list[int], int]:
    """`broadcast(squeeze(value))` to value's own shape: its node ids in order (the
    broadcast last) and the next free id."""
    steps, next_id = _squeeze(graph, value, next_id)
    kept = tuple(d for d, size in enumerate(value.shape) if size != 1)
    form = Node(
        next_id,
        "broadcast",
        (steps[-1],),
        value.shape,
        value.dtype,
        {"dims": kept},
        value.loc,
        f"{value.name}.unit_broadcast",
        value.framework_op,
    )
    graph.nodes[form.id] = form
    return [*steps, form.id], next_id + 1


def _candidate(node: Node) -> bool:
    shape = node.shape
    return (
        node.op not in SKIPPED
        and 1 in shape
        and 0 not in shape  # an empty value has nothing to broadcast
        and any(size != 1 for size in shape)
    )


def _squeeze(graph: Graph, node: Node, next_id: int) -> tuple[list[int], int]:
    """`node` with its size-1 dims dropped, as the canonical merge steps; returns their ids
    in order and the next free id."""
    kept = tuple(size for size in node.shape if size != 1)
    reshape = Node(
        next_id, "reshape", (node.id,), kept, node.dtype, {}, node.loc, f"{node.name}.squeezed"
    )
    steps = _decompose_reshape(reshape, node, next_id + 1)
    for step in steps:
        graph.nodes[step.id] = step
    return [s.id for s in steps], max(next_id + 1, *(s.id + 1 for s in steps))
