"""A whole training step proved layer by layer: the forward pass cut between its layers, the
backward pass between its layers' gradients, the backward's reads of the forward's values
related as proved in the forward's segments, and identical layers proved once. A bug in one
layer's backward is still caught there."""

from __future__ import annotations

import copy

import pytest
from conftest import REPO, export_example
from scalify.compiler.compile import compile_rule_dir

import scalify.verify as verify_module
from scalify.engine.partition import cut_points, forward_region, in_pass_order, segments
from scalify.frontends import load_graph
from scalify.ir import Node
from scalify.layout import layout_str
from scalify.mesh import parse_mesh
from scalify.relations import RelationsFile, input_relations, output_relations
from scalify.report.text import render_text
from scalify.verify import verify_graphs

pytest.importorskip("jax")
LAYERS = 4


@pytest.fixture(scope="module")
def step(tmp_path_factory):
    """The tiny Llama's training step over 4 layers (loss and every weight's gradient)."""
    return _exported_step(tmp_path_factory.mktemp("train_step"), "--parts", "train_layers")


def _exported_step(out, *args: str):
    """(baseline graph, tp graph, rules) of the tiny Llama's 4-layer stack exported so."""
    args = ("--config", "tiny", "--tp", "2", "--layers", str(LAYERS), *args, "--bugs", "none")
    export_example(REPO / "examples/llama/export.py", out, *args)
    rules = compile_rule_dir(REPO / "rules")
    return (
        load_graph(str(out / "baseline.hlo"), rules.custom_calls),
        load_graph(str(out / "tp.hlo"), rules.custom_calls),
        rules,
    )


def test_both_passes_are_cut_between_layers(step):
    base, dist, _ = step
    for graph in (base, dist):
        ordered = in_pass_order(graph)
        seen: set[int] = set()
        for node in ordered.nodes.values():  # still a topological order
            assert all(o in seen for o in node.operands), node.name
            seen.add(node.id)
        forward = forward_region(graph)
        position = {n: i for i, n in enumerate(ordered.nodes)}
        computed = [n for n in graph.nodes if graph.node(n).op != "parameter"]
        assert max(position[n] for n in forward) < min(
            position[n] for n in computed if n not in forward
        )
        sizes = [len(s.nodes) for s in segments(ordered, cut_points(ordered))]
        # two segments per layer (attention, MLP) in each pass, besides the small ones
        assert sum(size > 10 for size in sizes) >= 4 * LAYERS, sizes


def test_the_step_is_proved_with_the_layers_reused(step):
    base, dist, rules = step
    report = verify_graphs(base, dist, rules, parse_mesh("tp=2"))
    assert report.verdict == "equivalent", render_text(report)
    assert report.stats["partitions"] >= 4 * LAYERS, report.stats
    assert report.stats["memo_hits"] >= 2 * (LAYERS - 2), report.stats


def _backward_all_reduces(dist):
    forward = forward_region(dist)
    return [n for n in dist.nodes.values() if n.op == "all_reduce" and n.id not in forward]


def _without_a_middle_backward_all_reduce(dist):
    dist = copy.deepcopy(dist)
    reduces = _backward_all_reduces(dist)
    assert len(reduces) >= 2 * LAYERS
    dropped = reduces[len(reduces) // 2]
    for user in dist.users()[dropped.id]:
        node = dist.nodes[user]
        operands = tuple(dropped.operands[0] if o == dropped.id else o for o in node.operands)
        dist.nodes[user] = Node(
            node.id, node.op, operands, node.shape, node.dtype, node.attrs, node.loc, node.name
        )
    dist.derived.clear()
    return dist


def test_an_all_reduce_dropped_in_a_middle_layers_backward_is_caught(step):
    base, dist, rules = step
    report = verify_graphs(
        base, _without_a_middle_backward_all_reduce(dist), rules, parse_mesh("tp=2")
    )
    assert report.verdict == "not_equivalent", render_text(report)
    assert report.suspects


def test_a_failing_backward_segment_is_proved_again_whole(step, monkeypatch):
    """However large the graph: a backward segment's reads of the forward that do not pair
    up are no bug, so the failure is settled on the whole graph, not reported from it."""
    base, dist, rules = step
    monkeypatch.setattr(verify_module, "WHOLE_GRAPH_RETRY_NODES", 10)
    report = verify_graphs(
        base, _without_a_middle_backward_all_reduce(dist), rules, parse_mesh("tp=2")
    )
    assert report.verdict == "not_equivalent", render_text(report)
    assert report.stats["partitions"] == 1, report.stats


def _one_output_negated(base, dist, rules, mesh, index: int):
    """The report on `dist` with output `index` negated, every output held to the layout the
    program states for it (the negated one loses its annotation)."""
    dist = copy.deepcopy(dist)
    inputs = input_relations(base, dist, mesh, None)
    stated = RelationsFile(
        "<stated>",
        None,
        {},
        [layout_str(r.layout) for r in output_relations(base, dist, mesh, None, inputs)],
    )
    value = dist.node(dist.outputs[index])
    negated = Node(max(dist.nodes) + 1, "neg", (value.id,), value.shape, value.dtype, {}, value.loc)
    dist.nodes[negated.id] = negated
    dist.outputs[index] = negated.id
    dist.derived.clear()
    return verify_graphs(base, dist, rules, mesh, stated)


def test_a_middle_layers_weight_gradient_negated_is_not_proved(step):
    base, dist, rules = step
    index = len(dist.outputs) // 2
    report = _one_output_negated(base, dist, rules, parse_mesh("tp=2"), index)
    assert report.verdict == "not_equivalent", render_text(report)
    assert [o.index for o in report.outputs if not o.ok] == [index]


@pytest.fixture(scope="module")
def optimizer_step(tmp_path_factory):
    """The whole optimizer step on a (dp, tp) mesh: loss, gradients reduced over dp, and one
    AdamW update of every weight and both moments, over 4 layers."""
    out = tmp_path_factory.mktemp("optimizer_step")
    return _exported_step(out, "--dp", "2", "--batch", "4", "--parts", "train_step")


def test_an_optimizer_step_is_proved_layer_by_layer(optimizer_step):
    """The loss is a fifth of the program once AdamW follows the gradients, and XLA may put
    an update before the loss's last reduction: the forward pass is still found (the
    smallest loss-like region), so both passes cut between layers and repeat."""
    base, dist, rules = optimizer_step
    for graph in (base, dist):
        forward = forward_region(graph)
        assert graph.outputs[0] in forward
        assert not any(o in forward for o in graph.outputs[1:])
    report = verify_graphs(base, dist, rules, parse_mesh("dp=2,tp=2"))
    assert report.verdict == "equivalent", render_text(report)
    assert len(report.outputs) == 1 + 3 * (9 * LAYERS + 1)  # loss; weights, m, v
    assert report.stats["partitions"] > 2 * LAYERS and report.stats["memo_hits"] >= LAYERS


def test_an_updated_weight_negated_is_not_proved(optimizer_step):
    base, dist, rules = optimizer_step
    index = 1 + 9 * (LAYERS // 2)  # a middle layer's weight after the update
    report = _one_output_negated(base, dist, rules, parse_mesh("dp=2,tp=2"), index)
    assert report.verdict == "not_equivalent", render_text(report)
    assert [o.index for o in report.outputs if not o.ok] == [index]
