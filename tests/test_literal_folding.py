"""Arithmetic on literals folds before the proof: `x + 0` is x (a gradient accumulated into
fresh zeros, whose zeros are no value to count once per device), `0 + 0` a zero fill. The
folds are canonical rules (`rules/canon.srl`: `add_zero`, `sub_zero`, `fold_binary_fill`)."""

from __future__ import annotations

from scalify.canon.rewriter import builtin_rules, run
from scalify.ir import Graph, Node


def fold_literals(graph: Graph) -> None:
    run(graph, builtin_rules())


def _graph(zero_value: str, shape=(4,)) -> Graph:
    nodes = {
        0: Node(0, "parameter", (), shape, "f32", {"name": "x", "index": 0}, name="x"),
        1: Node(1, "constant", (), (), "f32", {"value": zero_value}, name="c"),
        2: Node(2, "broadcast", (1,), shape, "f32", {"dims": ()}, name="zeros"),
        3: Node(3, "add", (2, 0), shape, "f32", {}, name="sum"),
    }
    return Graph("g", nodes, inputs=[0], outputs=[3])


def test_a_value_added_to_zeros_is_the_value():
    graph = _graph("0.0")
    fold_literals(graph)
    assert graph.outputs == [0]


def test_a_value_added_to_another_fill_stays_a_sum():
    graph = _graph("1.0")
    fold_literals(graph)
    assert graph.nodes[graph.outputs[0]].op == "add"


def test_zero_taken_from_a_value_is_the_value_and_a_value_taken_from_zero_is_not():
    """`target - 0` (a vocabulary block that starts at 0) is the target; `0 - x` is -x."""
    graph = _graph("0")
    graph.nodes[3] = Node(3, "sub", (0, 2), (4,), "f32", {}, name="less_zero")
    fold_literals(graph)
    assert graph.outputs == [0]
    graph = _graph("0")
    graph.nodes[3] = Node(3, "sub", (2, 0), (4,), "f32", {}, name="from_zero")
    fold_literals(graph)
    assert graph.nodes[graph.outputs[0]].op == "sub"


def test_a_comparison_of_fills_folds_except_in_bf16():
    """`1 < 2` is the fill true; in bf16 two literals that differ in f64 may round to one
    value, so the comparison stays."""
    for dtype, folded in (("f32", True), ("bf16", False)):
        nodes = {
            0: Node(0, "constant", (), (), dtype, {"value": "1"}, name="a"),
            1: Node(1, "constant", (), (), dtype, {"value": "2"}, name="b"),
            2: Node(2, "compare", (0, 1), (), "pred", {"direction": "LT"}, name="lt"),
        }
        graph = Graph("g", nodes, inputs=[], outputs=[2])
        fold_literals(graph)
        out = graph.nodes[graph.outputs[0]]
        assert (out.op == "constant" and out.attrs["value"] == "true") == folded, out
