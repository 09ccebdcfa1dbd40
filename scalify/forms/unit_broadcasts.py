"""A value with size-1 dims, read also as the broadcast of its squeezed self (an equal form,
derived when a distributed graph is proved).

A dim split over the devices down to one entry each (one KV head per device) loses its
broadcasts: where the baseline broadcasts RoPE's `cos` across the heads
(`broadcast(squeeze(cos))`), XLA's partitioner leaves each device `cos` itself, whose head
dim already has the one entry the device needs. Each such value used by an elementwise op
gets the identical form `broadcast(squeeze(v))` back, to its own shape, in an equal form of
that op (or a concatenate: DeepSeek's rope key joined to each device's one head): the
broadcast's term is the baseline's broadcast term when the op's other operand fixes the
sizes, so the rules see a broadcast along a new dim (`spread`) as they do when the broadcast
is written out.
"""

from __future__ import annotations

import math
from dataclasses import replace

from scalify.canon.canonicalize import _decompose_reshape
from scalify.engine.encode import SIZED_FORMS, UNIT_TWINS
from scalify.ir import Graph, Node, place_after
from scalify.ops import ELEMENTWISE

SKIPPED = frozenset({"parameter", "constant", "iota", "broadcast"})


def with_unit_broadcast_forms(graph: Graph) -> Graph:
    """A copy of `graph` where each elementwise op or concatenate over a value with size-1
    dims (and others) has an equal form over `broadcast(squeeze(value))` instead, placed
    right after it. The form goes to the op, not to the value: a value's other users (a
    transpose, a merge) would pin the broadcast's sizes, and only elementwise users, or a
    concatenate along a dim the broadcast keeps, leave them free."""
    copy = replace(graph, nodes=dict(graph.nodes), equalities=list(graph.equalities), derived={})
    next_id = max(copy.nodes, default=-1) + 1
    forms: dict[int, int] = {}  # value -> its broadcast form
    placed: dict[int, list[int]] = {}
    twins: dict[int, int] = {}  # twin -> the broadcast form it reads
    for node in list(graph.nodes.values()):
        joins = node.op == "concatenate"
        if not (node.op in ELEMENTWISE or joins) or len(node.operands) < 2:
            continue
        added: list[int] = []
        for k, operand in enumerate(node.operands):
            if not _candidate(graph.node(operand)):
                continue
            if joins and graph.node(operand).shape[node.attrs["dim"]] == 1:
                continue  # the joined dim must be one the broadcast keeps
            if operand not in forms:
                ids, next_id = _broadcast_form(copy, graph.node(operand), next_id)
                forms[operand] = ids[-1]
                added += ids
            # one operand at a time: the others keep the sizes that anchor the broadcast
            added.append(_twin(copy, twins, node, k, forms[operand], next_id, "unit"))
            next_id += 1
        if added:
            placed[node.id] = added
    place_after(copy, placed)
    if twins:
        copy.derived[UNIT_TWINS] = twins
    return copy


def with_paired_broadcast_forms(graph: Graph) -> Graph:
    """A copy of `graph` where each elementwise op over two or more broadcasts has, for each
    of them, an equal form over a copy of that broadcast, which drops its sizes (the other
    broadcasts fix them). The encoder gives sizes to broadcasts that only meet each other,
    since one of them must keep its own; which one is no local choice: a mask `and`s the
    keys' test broadcast along the queries with the queries' test broadcast along the keys,
    and on a sequence shard the queries' dim is the device's block, the keys' dim whole.
    Both readings go into the e-graph (of both programs: the baseline's must meet the
    distributed one's), and the layout that holds picks one: in the form where one
    broadcast drops its sizes, the others are copies that keep theirs (the encoder's own
    choice for the op may be the other way round)."""
    copy = replace(graph, nodes=dict(graph.nodes), equalities=list(graph.equalities), derived={})
    twins: dict[int, int] = dict(graph.derived.get(UNIT_TWINS, {}))
    sized: set[int] = set(graph.derived.get(SIZED_FORMS, ()))
    next_id = max(copy.nodes, default=-1) + 1
    placed: dict[int, list[int]] = {}
    for node in list(graph.nodes.values()):
        if node.op not in ELEMENTWISE or node.id in twins:
            continue
        spread = [k for k, o in enumerate(node.operands) if _stretching(graph.node(o))]
        if len(spread) < 2:
            continue
        added: list[int] = []
        for k in spread:
            source = graph.node(node.operands[k])
            form = replace(source, id=next_id, name=f"{source.name}.free")
            copy.nodes[form.id] = form
            added.append(form.id)
            next_id += 1
            anchors = {}
            for j in spread:
                if j != k:
                    other = graph.node(node.operands[j])
                    anchors[j] = replace(other, id=next_id, name=f"{other.name}.sized")
                    copy.nodes[next_id] = anchors[j]
                    sized.add(next_id)
                    added.append(next_id)
                    next_id += 1
            twin = _twin(copy, twins, node, k, form.id, next_id, "free")
            copy.nodes[twin] = replace(
                copy.nodes[twin],
                operands=tuple(
                    anchors[j].id if j in anchors else o
                    for j, o in enumerate(copy.nodes[twin].operands)
                ),
            )
            added.append(twin)
            next_id += 1
        placed[node.id] = added
    place_after(copy, placed)
    if twins:
        copy.derived[UNIT_TWINS] = twins
    if sized:
        copy.derived[SIZED_FORMS] = frozenset(sized)
    return copy


def _twin(copy: Graph, twins: dict, node: Node, k: int, form: int, twin_id: int, kind: str) -> int:
    """`node` with operand k read as the broadcast form `form`: an equal value, added to
    `copy` beside the node and registered for the encoder (which lets the form drop its
    sizes when another operand fixes them)."""
    operands = list(node.operands)
    operands[k] = form
    twin = replace(node, id=twin_id, operands=tuple(operands), name=f"{node.name}.{kind}")
    copy.nodes[twin.id] = twin
    copy.equalities.append((node.id, twin.id))
    twins[twin.id] = form
    return twin.id


def _stretching(node: Node) -> bool:
    """A broadcast that makes at least one new dim of more than one entry."""
    if node.op != "broadcast":
        return False
    kept = set(node.attrs.get("dims", ()))
    return any(size > 1 for d, size in enumerate(node.shape) if d not in kept)


def _broadcast_form(graph: Graph, value: Node, next_id: int) -> tuple[list[int], int]:
    """`broadcast(squeeze(value))` to value's own shape: its node ids in order (the
    broadcast last) and the next free id."""
    steps, next_id = _squeeze(graph, value, next_id)
    kept = tuple(d for d, size in enumerate(value.shape) if size != 1)
    name = f"{value.name}.unit_broadcast"
    form = value.derived(next_id, "broadcast", (steps[-1],), value.shape, {"dims": kept}, name)
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
    in order and the next free id. The steps start from the value that `node` only adds or
    drops size-1 dims of, if it is such a view (a mask `[b, 1, s, s]` viewed as
    `[b, 1, 1, s, s]`): the squeezed values of both are then one term."""
    kept = tuple(size for size in node.shape if size != 1)
    source = node
    while _only_moves_unit_dims(graph, source):
        source = graph.node(source.operands[0])
    reshape = Node(
        next_id, "reshape", (source.id,), kept, node.dtype, {}, node.loc, f"{node.name}.squeezed"
    )
    steps = _decompose_reshape(reshape, source, next_id + 1)
    for step in steps:
        graph.nodes[step.id] = step
    return [s.id for s in steps], max(next_id + 1, *(s.id + 1 for s in steps))


def _only_moves_unit_dims(graph: Graph, node: Node) -> bool:
    """A view (a reshape step, or a broadcast that stretches nothing) whose operand has the
    same dims of more than one entry, in the same order."""
    if node.op not in ("split", "merge", "broadcast") or len(node.operands) != 1:
        return False
    operand = graph.node(node.operands[0])
    if node.op == "broadcast" and math.prod(node.shape) != math.prod(operand.shape):
        return False
    return [n for n in node.shape if n != 1] == [n for n in operand.shape if n != 1]
