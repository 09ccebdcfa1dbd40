"""AWS Neuron graphs as torch-neuronx prints them (transformers-neuronx Llama, from Entangle's
public data): locations from the stack in the metadata, the Neuron custom calls given meaning
by rules/neuron.srl, and the tensor-parallel programs proved against the single-device one,
with the fused QKV weight's per-part layout inferred from how both programs cut it."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from scalify.compiler.compile import compile_rule_dir

from scalify.errors import ScalifyError
from scalify.frontends import load_graph
from scalify.report.text import render_text
from scalify.verify import verify_files

HERE = Path(__file__).resolve().parent / "neuron"
RULES = Path(__file__).resolve().parents[2] / "rules"
FUSED_QKV = "p9: shard(1, tp, parts=[2048, 512, 512]) (inferred from how both graphs cut it)"


@pytest.fixture(scope="module")
def relations(tmp_path_factory) -> str:
    """All a Neuron pair needs: the per-rank outputs (logits, K and V caches) stay sharded."""
    path = tmp_path_factory.mktemp("neuron") / "relations.json"
    path.write_text(json.dumps({"outputs": "inferred"}))
    return str(path)


def _verify(baseline: str, distributed: str, tp: int, relations: str):
    return verify_files(
        str(HERE / baseline), str(HERE / distributed), RULES, mesh=f"tp={tp}", relations=relations
    )


def test_neuron_custom_calls_take_their_declared_meaning():
    rules = compile_rule_dir(RULES)
    for name in ("tp1_layer1.hlo.gz", "tp2_layer1.hlo.gz"):
        graph = load_graph(str(HERE / name), rules.custom_calls)
        assert not [n for n in graph.opaque_nodes() if n.attrs.get("hlo_op") == "custom-call"]


def test_locations_come_from_the_stack_in_the_metadata():
    graph = load_graph(str(HERE / "tp2_layer1.hlo.gz"))
    files = {n.loc.file for n in graph.nodes.values() if n.loc is not None}
    assert all(f.startswith("transformers_neuronx/") for f in files), sorted(files)[:5]
    sites = {str(n.loc.call_site) for n in graph.nodes.values() if n.loc and n.loc.call_site}
    assert any(s.startswith("transformers_neuronx/layers/attention.py:") for s in sites)


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_one_layer_is_equivalent_at_every_degree(tp, relations):
    report = _verify("tp1_layer1.hlo.gz", f"tp{tp}_layer1.hlo.gz", tp, relations)
    assert report.verdict == "equivalent", render_text(report)
    assert FUSED_QKV in report.relations["inputs"]


@pytest.mark.slow
@pytest.mark.parametrize("tp", [2, 4, 8])
def test_eight_layers_are_equivalent(tp, relations):
    report = _verify("tp1_layer8.hlo.gz", f"tp{tp}_layer8.hlo.gz", tp, relations)
    assert report.verdict == "equivalent", render_text(report)
    assert len(report.outputs) == 17  # the logits and each layer's K and V caches
    # proved layer by layer, each layer's caches inside its segment, the identical layers
    # once: the cost of eight layers is not eight times one. The first layer (whose input is
    # a parameter, and whose mask is listed in another place) is cut and keyed like the
    # others, so three proofs remain: a layer's attention, its MLP, and the head.
    stats = report.stats
    assert stats["partitions"] > 8 and stats["partitions"] - stats["memo_hits"] == 3, stats


def test_a_wrong_cache_in_a_middle_layer_is_caught_in_a_memoised_stack(relations):
    """Layer 4's cache negated in the distributed program: its segment is no longer the
    others' (no proof is reused for it), and that output alone is not proved (the graphs are
    too large for the simulator to settle the verdict, so it is not `equivalent`, which is
    all soundness asks)."""
    from scalify.ir import Node
    from scalify.mesh import parse_mesh
    from scalify.relations import read_relations_file
    from scalify.verify import verify_graphs

    rules = compile_rule_dir(RULES)
    base = load_graph(str(HERE / "tp1_layer8.hlo.gz"), rules.custom_calls)
    dist = load_graph(str(HERE / "tp2_layer8.hlo.gz"), rules.custom_calls)
    cache = dist.node(dist.outputs[7])
    negated = Node(
        max(dist.nodes) + 1, "neg", (cache.id,), cache.shape, cache.dtype, {}, cache.loc, "neg"
    )
    dist.nodes[negated.id] = negated
    dist.outputs[7] = negated.id
    report = verify_graphs(base, dist, rules, parse_mesh("tp=2"), read_relations_file(relations))
    assert report.verdict != "equivalent"
    assert [o.index for o in report.outputs if not o.ok] == [7]


def test_the_fused_weight_cut_as_one_block_is_not_proved(relations, tmp_path):
    """A plain shard of [Q|K|V] (what shapes alone suggest) gives each device the wrong
    columns: no proof, and the report points at the slices of the fused product."""
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps({"inputs": {"p9": "shard(1, tp)"}, "outputs": "inferred"}))
    report = _verify("tp1_layer1.hlo.gz", "tp2_layer1.hlo.gz", 2, str(plain))
    assert report.verdict != "equivalent"
    assert report.suspects[0].op == "slice"
    assert "per part" in report.suspects[0].reason


def test_the_broken_qkv_slice_is_caught_at_its_line(relations):
    """Entangle's planted bug: the K slice of the fused product starts at 0, not 1024."""
    report = _verify("tp1_layer1.hlo.gz", "tp2_layer1_broken.hlo.gz", 2, relations)
    assert report.verdict == "not_equivalent"
    first = report.suspects[0]
    assert first.node == "slice.54"
    assert str(first.called_from) == "transformers_neuronx/layers/attention.py:124"
    assert "output 1" in report.counterexample
    # the RoPE frequencies are printed as {...}: the simulation's stand-in is an assumption
    assert any(n.startswith("assumed: constants the graphs print as {...}") for n in report.notes)


# tp 6 divides neither the 32 q heads nor the 8 KV heads nor the MLP width 8192: the
# converter repeats each KV head for its 4 q heads, pads the heads to 36 and the width to
# 8196, and each device holds 6 heads and 1366 columns. One line states the fused QKV
# weight (a part per projection, each padded, K and V repeated per head of 64); the padded
# weights and the KV caches are inferred from their shapes.
KV_PART = "512 repeated(1, 4, 64) padded(1, 2304)"
TP6_QKV = f"shard(1, tp, parts=[2048 padded(1, 2304), {KV_PART}, {KV_PART}])"


@pytest.fixture(scope="module")
def tp6_relations(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("neuron_tp6") / "relations.json"
    path.write_text(json.dumps({"inputs": {"[2048, 1152]": TP6_QKV}, "outputs": "inferred"}))
    return str(path)


def test_tp6_padded_and_repeated_heads_are_proved(tp6_relations):
    report = _verify("tp1_layer1.hlo.gz", "tp6_layer1.hlo.gz", 6, tp6_relations)
    assert report.verdict == "equivalent", render_text(report)
    inputs = "\n".join(report.relations["inputs"])
    # the MLP width; the zeros the proof rests on are said
    assert (
        "p12: padded(1, 8196) shard(1, tp) (inferred from shapes; "
        "its padding assumed to hold zeros)" in inputs
    )
    assert "p10: padded(1, 2304) shard(1, tp)" in inputs  # the output projection's heads
    assert f"p9: {TP6_QKV} (relations file, inputs of shape [2048, 1152])" in inputs
    caches = [o.expected for o in report.outputs[1:]]
    assert caches == ["repeated(2, 4) padded(2, 36) shard(2, tp)"] * 2, caches


@pytest.mark.slow
def test_tp6_eight_layers_are_proved(tp6_relations):
    report = _verify("tp1_layer8.hlo.gz", "tp6_layer8.hlo.gz", 6, tp6_relations)
    assert report.verdict == "equivalent", render_text(report)
    assert len(report.outputs) == 17


def test_tp6_kv_heads_stated_as_repeated_columns_are_not_proved(tmp_path):
    """Each column repeated four times (unit 1) is not each head of 64 repeated: no proof."""
    wrong = TP6_QKV.replace("repeated(1, 4, 64)", "repeated(1, 4)")
    path = tmp_path / "relations.json"
    path.write_text(json.dumps({"inputs": {"[2048, 1152]": wrong}, "outputs": "inferred"}))
    report = _verify("tp1_layer1.hlo.gz", "tp6_layer1.hlo.gz", 6, str(path))
    assert report.verdict != "equivalent"


def test_tp6_k_slice_at_the_q_offset_is_caught(tp6_relations, tmp_path):
    """Entangle's bug, planted at tp 6: the K slice of the fused product starts at 0. That
    slice is a true block of the Q part, so the first op the baseline never computes is the
    scores' dot, whose report says that its K operand is the baseline's rotated Q."""
    text = gzip.decompress((HERE / "tp6_layer1.hlo.gz").read_bytes()).decode()
    broken = text.replace("slice={[0:256], [384:768]}", "slice={[0:256], [0:384]}", 1)
    assert broken != text
    path = tmp_path / "tp6_layer1_broken.hlo"
    path.write_text(broken)
    report = verify_files(
        str(HERE / "tp1_layer1.hlo.gz"), str(path), RULES, mesh="tp=6", relations=tp6_relations
    )
    assert report.verdict == "not_equivalent"  # the K cache's cone is simulated
    assert "output 1" in report.counterexample
    first = report.suspects[0]
    assert first.node == "dot.88", render_text(report)
    assert (
        "operand `concatenate.84` is padded(2, 36) shard(2, tp) of baseline `concatenate.71`"
        in (render_text(report))
    )


def test_a_named_input_comes_before_its_shape_and_an_unused_shape_is_an_error(tmp_path):
    """`p9` named gets its own layout (K and V heads stated as repeated columns: not proved)
    over the shape's entry; a shape that no input has is reported like an unknown name."""
    columns = TP6_QKV.replace("repeated(1, 4, 64)", "repeated(1, 4)")
    named = tmp_path / "named.json"
    inputs = {"[2048, 1152]": TP6_QKV, "p9": columns}
    named.write_text(json.dumps({"inputs": inputs, "outputs": "inferred"}))
    report = _verify("tp1_layer1.hlo.gz", "tp6_layer1.hlo.gz", 6, str(named))
    assert f"p9: {columns} (relations file)" in report.relations["inputs"]
    assert report.verdict != "equivalent"
    unused = tmp_path / "unused.json"
    unused.write_text(json.dumps({"inputs": {"[7, 7]": "shard(0, tp)"}}))
    with pytest.raises(ScalifyError, match=r"does not have: \[7, 7\]"):
        _verify("tp1_layer1.hlo.gz", "tp6_layer1.hlo.gz", 6, str(unused))
