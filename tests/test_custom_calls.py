"""Custom calls given meaning in rule files: a declared target is replaced by its meaning
before the proof (and checked numerically here), an undeclared one stays opaque and the
report names it with the line to write, and bad declarations are errors at their line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, rules_with, run_cli
from scalify.compiler.compile import compile_rule_dir, compile_texts

from scalify.errors import ScalifyError
from scalify.frontends import load_graph
from scalify.frontends.custom_calls import undeclared_note
from scalify.simulate.spmd import run_baseline

PAIR = REPO / "tests" / "custom_calls"
DECLARATIONS = """\
# the vendor's weight move: its operand
custom_call "VendorMoveWeight" = operand(0)
# the vendor's RMSNorm over the hidden dim
custom_call "VendorRmsNorm" = rms_norm(0, 1, 2)
"""


@pytest.fixture()
def scratch_rules(tmp_path: Path) -> Path:
    """The shipped rules plus a vendor's declarations, in a folder of their own."""
    return rules_with(tmp_path / "rules", "vendor.srl", DECLARATIONS)


def test_declared_custom_calls_are_proved(scratch_rules):
    result = run_cli(
        "verify", str(PAIR / "baseline.hlo"), str(PAIR / "tp.hlo"), "--rules", str(scratch_rules)
    )
    assert result.code == 0, result.out
    assert "verdict: equivalent" in result.out


def test_undeclared_custom_calls_are_named_with_the_line_to_write():
    result = run_cli("verify", str(PAIR / "baseline.hlo"), str(PAIR / "tp.hlo"))
    assert result.code == 1
    assert "opaque op `custom-call`" in result.out
    assert 'custom_call "VendorMoveWeight" = operand(0)' in result.out
    assert "custom call `VendorRmsNorm` has no declared meaning" in result.out


def test_rms_norm_meaning_computes_an_rms_norm(scratch_rules):
    rules = compile_rule_dir(scratch_rules)
    graph = load_graph(str(PAIR / "baseline.hlo"), rules.custom_calls)
    assert not graph.opaque_nodes()
    rng = np.random.default_rng(0)
    inputs = {i: rng.standard_normal(graph.node(i).shape) for i in graph.inputs}
    x, weight, w = (inputs[i] for i in graph.inputs)
    values = run_baseline(graph, inputs)
    expected = w @ (x / np.sqrt((x * x).mean(axis=0, keepdims=True) + 1e-5) * weight[:, None])
    np.testing.assert_allclose(values[graph.outputs[0]], expected, rtol=1e-6)


def test_a_meaning_that_does_not_fit_leaves_the_call_opaque_and_says_why():
    # the weight is operand 1, not 0: no dim of the norm's input is as long as operand 0
    rules = compile_texts([("vendor.srl", 'custom_call "VendorRmsNorm" = rms_norm(1, 0, 2)\n')])
    graph = load_graph(str(PAIR / "baseline.hlo"), rules.custom_calls)
    (opaque,) = graph.opaque_nodes()
    note = undeclared_note([opaque])
    assert "`VendorRmsNorm`: its operands do not fit the meaning declared at vendor.srl:1" in note


@pytest.mark.parametrize(
    "text, message, column",
    [
        ('custom_call "T" = norm(0)\n', "unknown custom-call meaning `norm`", 19),
        ('custom_call "T" = rms_norm(0, 1)\n', "takes 3 operand position(s)", 19),
        ('custom_call "T" = operand(x)\n', "operand positions of the call", 27),
        ('custom_call "T" = operand[k=1](0)\n', "`operand` has no attribute `k`", 19),
        ('custom_call "T" = scatter_add[dim=x](0, 1, 2)\n', "attribute `dim` is an integer", 35),
    ],
)
def test_bad_declarations_are_errors_at_their_line(text, message, column):
    with pytest.raises(ScalifyError) as caught:
        compile_texts([("vendor.srl", text)])
    error = caught.value
    assert message in error.message
    assert (error.path, error.line, error.column) == ("vendor.srl", 1, column)


def test_a_target_declared_twice_is_an_error_naming_the_first():
    text = 'custom_call "T" = operand(0)\n# again\ncustom_call "T" = operand(0)\n'
    with pytest.raises(ScalifyError) as caught:
        compile_texts([("vendor.srl", text)])
    assert "declared twice" in caught.value.message
    assert caught.value.line == 3
    assert "first declared at vendor.srl:1" in caught.value.notes
