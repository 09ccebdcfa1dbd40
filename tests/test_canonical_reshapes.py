"""Reshapes as the canonical form reads them: both orders of a reshape of several dim groups
(heads merged before batch and sequence, or after), and an empty tensor's reshape."""

from __future__ import annotations

from scalify.canon.canonicalize import canonicalize
from scalify.ir import Graph, Node


def test_a_reshape_of_several_groups_is_read_in_both_orders():
    """`[2, 8, 4, 16] -> [16, 64]` merges batch with sequence and heads with head_dim; code
    that merges the heads first passes through `[2, 8, 64]`, so that value is in the graph
    too, equal to the reshape."""
    nodes = {
        0: Node(0, "parameter", (), (2, 8, 4, 16), "f32", {"name": "x", "index": 0}, name="x"),
        1: Node(1, "reshape", (0,), (16, 64), "f32", {}, name="r"),
    }
    graph = canonicalize(Graph("g", nodes, inputs=[0], outputs=[1]))
    shapes = {n.shape for n in graph.nodes.values()}
    assert {(16, 4, 16), (2, 8, 64)} <= shapes, shapes
    assert any(graph.outputs[0] in pair for pair in graph.equalities)


def test_an_empty_tensor_reshapes_without_steps():
    nodes = {
        0: Node(0, "parameter", (), (0, 4), "f32", {"name": "x", "index": 0}, name="x"),
        1: Node(1, "reshape", (0,), (0, 2, 2), "f32", {}, name="r"),
    }
    graph = canonicalize(Graph("g", nodes, inputs=[0], outputs=[1]))
    assert graph.node(graph.outputs[0]).shape == (0, 2, 2)


def test_a_broadcast_of_a_broadcast_keeps_its_squeezed_form_well_formed():
    """A mask broadcast over KV heads, viewed with a unit dim and back, then over the query
    heads of each (EasyDeL's attention mask): the two broadcasts compose into one, and the
    form with the operand's unit dims squeezed first reads the composed operand's dims."""
    nodes = {
        0: Node(0, "parameter", (), (1, 16, 16), "pred", {"name": "m", "index": 0}, name="m"),
        1: Node(1, "broadcast", (0,), (1, 2, 16, 16), "pred", {"dims": (0, 2, 3)}, name="b1"),
        2: Node(2, "reshape", (1,), (1, 2, 1, 16, 16), "pred", {}, name="r1"),
        3: Node(3, "reshape", (2,), (1, 2, 16, 16), "pred", {}, name="r2"),
        4: Node(4, "broadcast", (3,), (1, 2, 2, 16, 16), "pred", {"dims": (0, 1, 3, 4)}),
    }
    graph = canonicalize(Graph("g", nodes, inputs=[0], outputs=[4]))
    for node in graph.nodes.values():
        if node.op == "broadcast":
            operand = graph.node(node.operands[0])
            assert len(node.attrs["dims"]) == len(operand.shape), (node, operand)
