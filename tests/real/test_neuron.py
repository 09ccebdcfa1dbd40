"""AWS Neuron graphs as torch-neuronx prints them: locations from the stack in the metadata,
and the Neuron custom calls given meaning by rules/neuron.srl."""

from __future__ import annotations

from pathlib import Path

from scalify.compiler.compile import compile_rule_dir

from scalify.frontends import load_graph

HERE = Path(__file__).resolve().parent / "neuron"
RULES = Path(__file__).resolve().parents[2] / "rules"


def test_neuron_custom_calls_take_their_declared_meaning():
    rules = compile_rule_dir(RULES)
    for name in ("tp1_layer1.hlo", "tp2_layer1.hlo"):
        graph = load_graph(str(HERE / name), rules.custom_calls)
        assert not [n for n in graph.opaque_nodes() if n.attrs.get("hlo_op") == "custom-call"]


def test_locations_come_from_the_stack_in_the_metadata():
    graph = load_graph(str(HERE / "tp2_layer1.hlo"))
    files = {n.loc.file for n in graph.nodes.values() if n.loc is not None}
    assert all(f.startswith("transformers_neuronx/") for f in files), sorted(files)[:5]
    sites = {str(n.loc.call_site) for n in graph.nodes.values() if n.loc and n.loc.call_site}
    assert any(s.startswith("transformers_neuronx/layers/attention.py:") for s in sites)
