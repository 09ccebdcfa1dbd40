"""Elementwise work on a device's block moved below the all-gather that collects the blocks.

XLA's partitioner may compute part of a value on each device's block and gather it after:
on a (fsdp, tp, sp) mesh it computes the vocab-parallel lookup's local index `ids - start`
and its in-block mask on the tp devices' blocks of the sequence, then all-gathers both over
tp, where the baseline (and every spelling block_lookup.py reads) computes them on the
gathered ids. Gathering blocks and applying an elementwise op commute, provided each other
operand is the same value everywhere in the tensor and on every device of a gather group
(integer and predicate ops only: index and mask arithmetic):

    all_gather(f(x, broadcast(s))) == f(all_gather(x), broadcast(s))

when s has one element whose value (a literal, or arithmetic on the device's id, evaluated
on every device) is equal within each group. Several full operands are gathered each, and
one gather of a value is shared, so the index and the mask read the same gathered ids. The
rewrite is exact; anything else is left as it is.
"""

from __future__ import annotations

import math

from scalify.externs.device_tables import DeviceScalars
from scalify.externs.int_ranges import is_int_dtype
from scalify.ir import Graph, NewNodes, Node, replace_nodes
from scalify.ops import ELEMENTWISE


def sink_gathers(graph: Graph) -> None:
    """Move elementwise ops below all-gathers (see the module doc), until none moves. Only
    in a module that names its device count: the test below evaluates values per device."""
    devices = graph.num_partitions
    if not devices or devices < 2:
        return
    while _sink_once(graph, DeviceScalars(graph, devices)):
        pass


def _sink_once(graph: Graph, values: DeviceScalars) -> bool:
    """One pass over the graph: each all-gather of an elementwise op moved below it."""
    gathered: dict[tuple, int] = {}  # (operand, dim, groups) -> its gather, made once
    moved = False

    def rewrite(node: Node, next_id: int) -> list[Node]:
        nonlocal moved
        inner = graph.nodes[node.operands[0]] if node.op == "all_gather" else None
        if inner is None or inner.op not in ELEMENTWISE or not inner.operands:
            return []
        if not all(_index_typed(graph.nodes[o]) for o in (inner.id, *inner.operands)):
            return []
        groups = node.attrs.get("groups", ())
        kinds = [_operand_kind(graph.nodes[o], inner, node, values, groups) for o in inner.operands]
        if None in kinds or "full" not in kinds:
            return []
        new = NewNodes(node, next_id)
        operands = []
        for operand, kind in zip(inner.operands, kinds, strict=True):
            source = graph.nodes[operand]
            shape = _gathered_shape(source.shape, node)
            if kind == "same":
                operands.append(
                    new.add("broadcast", source.operands, shape, source.dtype, source.attrs)
                )
                continue
            key = (operand, node.attrs.get("dim"), groups)
            if key not in gathered:
                attrs = dict(node.attrs)
                gathered[key] = new.add("all_gather", (operand,), shape, source.dtype, attrs)
                new.nodes[-1].name = f"{node.name}({source.name})"
            operands.append(gathered[key])
        new.add(inner.op, tuple(operands), node.shape, node.dtype, dict(inner.attrs))
        new.nodes[-1].loc, new.nodes[-1].name = inner.loc, inner.name  # the same op, moved
        moved = True
        return new.nodes

    replace_nodes(graph, rewrite)
    _share_gathers(graph)
    graph.derived.clear()
    return moved


def _share_gathers(graph: Graph) -> None:
    """One all-gather per value and group: the copies the moves made are the same value."""
    alias: dict[int, int] = {}
    first: dict[tuple, int] = {}
    for node in graph.nodes.values():
        node.operands = tuple(alias.get(o, o) for o in node.operands)
        if node.op == "all_gather":
            key = (node.operands, node.attrs.get("dim"), node.attrs.get("groups"))
            if key in first:
                alias[node.id] = first[key]
            else:
                first[key] = node.id
    if alias:
        graph.nodes = {i: n for i, n in graph.nodes.items() if i not in alias}
        graph.outputs = [alias.get(o, o) for o in graph.outputs]
        graph.equalities = [(alias.get(a, a), alias.get(b, b)) for a, b in graph.equalities]
        graph.output_shardings = {alias.get(k, k): v for k, v in graph.output_shardings.items()}


def _same_within(per_device: list, groups) -> bool:
    """Whether the value is equal on every device of each group. Groups that do not list
    every device exactly once (a traced program names its own device's group only) say
    nothing of the others: then the value must be equal on every device."""
    members = sorted(d for group in groups for d in group)
    if not groups or members != list(range(len(per_device))):
        return len(set(per_device)) == 1
    return all(len({per_device[d] for d in group}) == 1 for group in groups)


def _index_typed(node: Node) -> bool:
    """Integer or predicate: index and mask arithmetic, the values this pass is for (a float
    activation gathered after a norm is proved where it is)."""
    return node.dtype == "pred" or is_int_dtype(node.dtype)


def _gathered_shape(shape: tuple[int, ...], gather: Node) -> tuple[int, ...]:
    dim = gather.attrs["dim"]
    return shape[:dim] + (gather.shape[dim],) + shape[dim + 1 :]


def _operand_kind(
    operand: Node, inner: Node, gather: Node, values: DeviceScalars, groups
) -> str | None:
    """What an operand of the gathered op is: `full`, a block to gather; `same`, a broadcast
    of one value equal on every device of each group (its dims missing the gathered one);
    None, neither."""
    if operand.op == "broadcast" and math.prod(values.graph.node(operand.operands[0]).shape) == 1:
        dims = tuple(operand.attrs.get("dims", ()))
        if gather.attrs["dim"] in dims:
            return None
        per_device = values.of(operand.operands[0])
        if per_device is None:
            return None
        return "same" if _same_within(per_device, groups) else None
    return "full" if operand.shape == inner.shape else None
