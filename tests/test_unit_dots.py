"""Dots whose operands had a unit dim squeezed away, with the unit kept as a batch pair
(`scalify/forms/unit_dots.py`): every form it adds equals the node it is paired with, checked
numerically on a graph that uses each case, and the forms appear where they should."""

from __future__ import annotations

import numpy as np

from scalify.canon.canonicalize import canonicalize
from scalify.forms.unit_dots import with_unit_dot_forms
from scalify.frontends import parse_graph_text
from scalify.simulate.spmd import random_input, run_baseline

# q with one head [b, s, 1, d] and k^T [b, 1, d, s], both squeezed (a device's one head),
# their scores, and the scores times a v that was never 4-D ([b, s, d])
BATCHED = (
    "lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}"
)
HEADS = f"""HloModule m
ENTRY main {{
  q = f32[2,8,1,4] parameter(0)
  k = f32[2,1,4,8] parameter(1)
  v = f32[2,8,4] parameter(2)
  q3 = f32[2,8,4] reshape(q)
  k3 = f32[2,4,8] reshape(k)
  scores = f32[2,8,8] dot(q3, k3), {BATCHED}
  ROOT o = f32[2,8,4] dot(scores, v), {BATCHED}
}}
"""


def test_every_added_form_equals_its_node():
    graph = canonicalize(parse_graph_text(HEADS, "m.hlo"))
    forms = with_unit_dot_forms(graph)
    added = [pair for pair in forms.equalities if pair not in graph.equalities]
    rng = np.random.default_rng(0)
    values = run_baseline(forms, {i: random_input(forms.node(i), rng) for i in forms.inputs})
    assert len(added) >= 5  # the scores, and o with v's unit before each of its 3 dims, ...
    for node_id, form in added:
        assert forms.node(node_id).shape == forms.node(form).shape
        np.testing.assert_allclose(values[node_id], values[form], rtol=1e-6)


def test_the_kept_unit_is_a_batch_pair_after_the_batch_dims():
    graph = canonicalize(parse_graph_text(HEADS, "m.hlo"))
    forms = with_unit_dot_forms(graph)
    lifted = [n for n in forms.nodes.values() if n.op == "dot" and n.id not in graph.nodes]
    scores = [n for n in lifted if n.shape == (2, 1, 8, 8)]
    assert scores and all(n.attrs["lhs_batch"] == (0, 1) for n in scores)
    assert all(n.attrs["rhs_batch"] == (0, 1) for n in scores)


def test_a_dot_without_a_squeezed_operand_gets_no_form():
    text = HEADS.replace("q3 = f32[2,8,4] reshape(q)", "q3 = f32[2,8,4] parameter(3)")
    text = text.replace("k3 = f32[2,4,8] reshape(k)", "k3 = f32[2,4,8] parameter(4)")
    graph = canonicalize(parse_graph_text(text, "m.hlo"))
    forms = with_unit_dot_forms(graph)
    scores = [n for n in graph.nodes.values() if n.name == "scores"]
    assert scores and all(scores[0].id not in pair for pair in forms.equalities)
