"""A segment's memo key sees its structure, not the order its nodes are listed in: the last
layer of torch-neuronx's stack builds its mask after the RoPE tables, the others before, and
its proof is still reused. Equal keys place the memoised facts at the same nodes."""

from __future__ import annotations

from scalify.engine.partition import canonical_order, structural_key
from scalify.ir import Graph, Node
from scalify.layout import Placement
from scalify.relations import Relation


def _layer(order: list[str]) -> Graph:
    """x * mask + rope(x): the same values, listed in `order`."""
    made = {
        "x": Node(0, "parameter", (), (4, 8), "f32", {"index": 0}),
        "w": Node(1, "parameter", (), (4, 8), "f32", {"index": 1}),
        "mask": Node(2, "exp", (0,), (4, 8), "f32"),
        "rope": Node(3, "cos", (1,), (4, 8), "f32"),
        "masked": Node(4, "mul", (0, 2), (4, 8), "f32"),
        "out": Node(5, "add", (4, 3), (4, 8), "f32"),
    }
    nodes = {made[name].id: made[name] for name in order}
    return Graph("layer", nodes, [0, 1], [5])


def _key(graph: Graph) -> str:
    layout = (Placement("shard", "tp", dim=1),)
    relations = [Relation(i, i, f"p{i}", layout, "test") for i in graph.inputs]
    return structural_key(graph, graph, relations)


def test_nodes_listed_in_another_order_key_alike():
    first = _layer(["x", "w", "mask", "rope", "masked", "out"])
    second = _layer(["x", "w", "rope", "mask", "masked", "out"])
    assert list(first.nodes) != list(second.nodes)
    assert _key(first) == _key(second)
    # the order places node k of one copy where node k of the other is
    assert canonical_order(first) == canonical_order(second)


def test_a_different_operand_order_keys_apart():
    graph = _layer(["x", "w", "mask", "rope", "masked", "out"])
    swapped = _layer(["x", "w", "mask", "rope", "masked", "out"])
    swapped.nodes[5] = Node(5, "sub", (4, 3), (4, 8), "f32")
    flipped = _layer(["x", "w", "mask", "rope", "masked", "out"])
    flipped.nodes[5] = Node(5, "sub", (3, 4), (4, 8), "f32")
    assert _key(swapped) != _key(flipped) != _key(graph)


def test_equalities_are_part_of_the_key():
    plain = _layer(["x", "w", "mask", "rope", "masked", "out"])
    joined = _layer(["x", "w", "mask", "rope", "masked", "out"])
    joined.equalities = [(2, 3)]
    assert _key(plain) != _key(joined)
