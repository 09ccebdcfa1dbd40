"""The alternative forms proving adds to a graph (slices moved through dots, concatenations
and views; unit dims moved through elementwise ops) compute exactly what the nodes they are
unioned with compute: checked by running both forms on random inputs, per device."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import REPO, export_example

from scalify.forms.slice_views import with_slice_alternatives
from scalify.frontends import load_graph
from scalify.ir import Graph
from scalify.mesh import Mesh
from scalify.relations import input_relations
from scalify.simulate.spmd import distribute, random_input, run_baseline, run_spmd
from scalify.verify import alternative_forms

pytest.importorskip("jax")


@pytest.fixture(scope="module", params=[("--fused",), ("--heads-view", "tp")], ids=str)
def fused_llama(request, tmp_path_factory):
    """One tiny Llama layer at tp 2 with fused [Q|K|V] and [gate|up] weights, or with heads
    projected straight from viewed weights (the baseline reshapes after the matmul)."""
    out = tmp_path_factory.mktemp("variant")
    script = REPO / "examples" / "llama" / "export.py"
    args = ("--config", "tiny", "--tp", "2", "--parts", "layers", "--layers", "1")
    return export_example(script, out, *args, *request.param, "--bugs", "none")


def derived(graph: Graph, baseline: bool) -> Graph:
    return with_slice_alternatives(alternative_forms(graph), baseline)


def pairs_agree(graph: Graph, values) -> int:
    """Assert every added equality holds on `values`; returns how many were checked."""
    for a, b in graph.equalities:
        np.testing.assert_allclose(np.asarray(values[a]), np.asarray(values[b]), rtol=1e-9)
    return len(graph.equalities)


def test_moved_slices_and_views_equal_their_originals_in_both_graphs(fused_llama):
    base = load_graph(str(fused_llama / "baseline.hlo"))
    dist = load_graph(str(fused_llama / "tp.hlo"))
    mesh = Mesh((("tp", 2),))
    rng = np.random.default_rng(0)
    base_alt, dist_alt = derived(base, True), derived(dist, False)
    # the baseline always gets some (its fused weights are cut, its views moved); the
    # distributed graph may hold none once reshape round trips are folded
    assert len(base_alt.nodes) > len(base.nodes)

    base_inputs = {i: random_input(base.node(i), rng) for i in base.inputs}
    base_values = run_baseline(base_alt, base_inputs)
    dist_inputs = {
        r.dist_id: distribute(base_inputs[r.base_id], r.layout, mesh, rng)
        for r in input_relations(base, dist, mesh, None)
    }
    dist_values = run_spmd(dist_alt, dist_inputs, mesh)
    per_device = [{k: v[d] for k, v in dist_values.items()} for d in range(mesh.size)]

    assert pairs_agree(base_alt, base_values) >= 2  # at least the q/k/v and gate/up cuts
    for values in per_device:
        pairs_agree(dist_alt, values)


GATHER = (
    "gather(w, ids), offset_dims={1,2}, collapsed_slice_dims={0}, start_index_map={0}, "
    "index_vector_dim=1, slice_sizes={1,8,6}"
)
LOOKUP_THEN_CUT = f"""HloModule lookup_then_cut

ENTRY main {{
  w = f32[3,8,6] parameter(0)
  ids = s32[4,1] parameter(1)
  rows = f32[4,8,6] {GATHER}
  ROOT cut = f32[4,8,3] slice(rows), slice={{[0:4], [0:8], [2:5]}}
}}
"""


def test_a_cut_of_looked_up_rows_moves_into_the_table():
    """One expert's fused weight picked by id, then cut: the cut moves into the table."""
    from scalify.frontends import parse_graph_text

    graph = parse_graph_text(LOOKUP_THEN_CUT, "lookup.hlo")
    moved = derived(graph, True)
    assert any(
        n.op == "take" and moved.node(n.operands[0]).op == "slice" for n in moved.nodes.values()
    )
    rng = np.random.default_rng(0)
    values = run_baseline(moved, {i: random_input(graph.node(i), rng) for i in graph.inputs})
    assert pairs_agree(moved, values) >= 1


UNIT_STACK = """\
HloModule stack
ENTRY main {
  x = f32[2,3,4] parameter(0)
  c = f32[2,4] parameter(1)
  cb = f32[2,3,4] broadcast(c), dimensions={0,2}
  m = f32[2,3,4] multiply(x, cb)
  ROOT s = f32[2,3,4,1] reshape(m)
}
"""


def test_a_unit_dim_moved_through_a_broadcast_operand_broadcasts_to_the_new_shape():
    """`reshape(x * broadcast(c))` with a new unit dim: the moved form multiplies the reshaped
    x by a broadcast of c straight to the new shape (no reshape of the broadcast, which
    would pin its sizes), and equals the original."""
    from scalify.frontends import parse_graph_text

    graph = parse_graph_text(UNIT_STACK, "stack.hlo")
    forms = alternative_forms(graph)
    added = [n for n in forms.nodes.values() if n.id not in graph.nodes]
    assert any(n.op == "broadcast" and n.shape == (2, 3, 4, 1) for n in added)
    (broadcast,) = [n.id for n in graph.nodes.values() if n.name == "cb"]
    assert not any(broadcast in n.operands for n in added)
    rng = np.random.default_rng(0)
    inputs = {i: random_input(graph.node(i), rng) for i in graph.inputs}
    assert pairs_agree(forms, run_baseline(forms, inputs)) >= 1
