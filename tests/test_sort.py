"""HLO `sort` whose comparator orders by the first operand (argsort, sorted routing: a
`compare(p0, p1)`, LT or GT) has numeric semantics: a stable sort along its dim, every
operand put in the keys' order. A MoE router that sorts unreduced scores is then caught with
a counterexample where it was `unknown`; any other comparator stays opaque and is named."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import verify_texts

from scalify.frontends import parse_graph_text
from scalify.simulate.spmd import run_baseline

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

COMPARATOR = """
less {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  c = s32[] parameter(2)
  d = s32[] parameter(3)
  ROOT lt = pred[] compare(a, b), direction=DIRECTION
}
"""


def _argsort_module(rows: int, direction: str, reduced: bool) -> str:
    """Scores summed over tp (or not, on the devices), then argsorted down the rows."""
    reduce = "all-reduce(p), replica_groups={{0,1}}, to_apply=add" if reduced else "copy(p)"
    return f"""HloModule m
add {{
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}}
{COMPARATOR.replace("DIRECTION", direction)}
ENTRY main {{
  p = f32[{rows},3] parameter(0)
  r = f32[{rows},3] {reduce}
  i = s32[{rows},3] iota(), iota_dimension=0
  s = (f32[{rows},3], s32[{rows},3]) sort(r, i), dimensions={{0}}, is_stable=true, to_apply=less
  ROOT o = s32[{rows},3] get-tuple-element(s), index=1
}}
"""


def test_jax_argsort_is_simulated_as_a_stable_sort():
    x = np.array([[3.0, 1.0], [1.0, 1.0], [2.0, 0.0], [1.0, 5.0]], np.float32)
    text = jax.jit(lambda v: jnp.argsort(v, axis=0)).lower(x).as_text(dialect="hlo")
    graph = parse_graph_text(text, "argsort.hlo")
    assert any(n.op == "sort" for n in graph.nodes.values())
    values = run_baseline(graph, {graph.inputs[0]: x})
    out = values[graph.outputs[0]]
    assert np.array_equal(out, np.argsort(x, axis=0, kind="stable"))


@pytest.mark.parametrize("direction", ["LT", "GT"])
def test_a_sort_of_reduced_scores_is_proved(tmp_path, direction):
    base = _argsort_module(4, direction, reduced=False)  # one device: nothing to reduce
    dist = _argsort_module(4, direction, reduced=True)
    relations = {"inputs": {"p": "partial(sum, tp)"}, "outputs": ["replicate"]}
    report = verify_texts(tmp_path, base, dist, relations, "tp=2")
    assert report.verdict == "equivalent", [s.reason for s in report.suspects]


def test_a_sort_of_unreduced_scores_is_caught_with_a_counterexample(tmp_path):
    base = _argsort_module(4, "GT", reduced=False)
    dist = _argsort_module(4, "GT", reduced=False)
    relations = {"inputs": {"p": "partial(sum, tp)"}, "outputs": ["replicate"]}
    report = verify_texts(tmp_path, base, dist, relations, "tp=2")
    assert report.verdict == "not_equivalent"
    assert report.counterexample


def test_a_sort_by_another_comparator_stays_opaque_and_is_named(tmp_path):
    text = _argsort_module(4, "LT", reduced=False).replace(
        "ROOT lt = pred[] compare(a, b), direction=LT",
        "ROOT lt = pred[] compare(c, d), direction=LT",
    )
    graph = parse_graph_text(text, "by_index.hlo")
    assert not any(n.op == "sort" for n in graph.nodes.values())
    assert any(n.op == "opaque" for n in graph.nodes.values())


@pytest.mark.parametrize("dims", ["{0,1}", "{2}", "{}"])
def test_a_sort_without_one_dimension_in_range_is_refused_at_its_line(tmp_path, capsys, dims):
    from scalify.cli import main

    text = _argsort_module(4, "LT", reduced=False).replace("dimensions={0}", f"dimensions={dims}")
    path = tmp_path / "bad.hlo"
    path.write_text(text)
    line = next(i for i, s in enumerate(text.splitlines(), 1) if " sort(" in s)
    code = main(["verify", str(path), str(path), "--mesh", "tp=2"])
    err = capsys.readouterr().err
    assert code == 2
    assert f"bad.hlo:{line}:" in err and "needs one dimension to sort along" in err
