"""Custom calls given meaning in rule files: a declared target is replaced by its meaning
before the proof (and checked numerically here), an undeclared one stays opaque and the
report names it with the line to write, and bad declarations are errors at their line."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, rules_with, run_cli
from scalify.compiler.compile import compile_rule_dir, compile_texts

from scalify.errors import ScalifyError
from scalify.frontends import load_graph, parse_graph_text
from scalify.frontends.custom_calls import undeclared_note
from scalify.simulate.spmd import run_baseline
from scalify.soundness.lint import expression_problem

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
        "verify",
        str(PAIR / "baseline.hlo"),
        str(PAIR / "tp.hlo"),
        "--rules",
        str(scratch_rules),
        "--relations",
        str(PAIR / "relations.json"),
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


# ---- meanings written as expressions over the call's operands --------------------------------

GELU = """\
# the vendor's tanh-approximate GELU: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
custom_call "VendorGelu"(x) =
  mul(0.5, mul(x, add(1, tanh(mul(0.7978845608028654, add(x, mul(0.044715, mul(x, mul(x, x)))))))))
  reference gelu_tanh
"""


@pytest.fixture()
def gelu_rules(tmp_path: Path) -> Path:
    """The shipped rules plus a tanh-GELU declared as an expression."""
    return rules_with(tmp_path / "rules", "vendor.srl", GELU)


def test_an_expression_meaning_proves_a_tensor_parallel_gelu_mlp(gelu_rules):
    # the custom call between a column-parallel and a row-parallel dot
    result = run_cli(
        "verify",
        str(PAIR / "gelu_baseline.hlo"),
        str(PAIR / "gelu_tp.hlo"),
        "--rules",
        str(gelu_rules),
        "--relations",
        str(PAIR / "gelu_relations.json"),
    )
    assert result.code == 0, result.out
    assert "verdict: equivalent" in result.out


def test_the_gelu_of_a_partial_sum_is_not_proved(gelu_rules):
    # the near-miss: the first dot is row-parallel, and the GELU runs on each device's part
    # of the sum before the all-reduce
    result = run_cli(
        "verify",
        str(PAIR / "gelu_baseline.hlo"),
        str(PAIR / "gelu_tp_of_partial.hlo"),
        "--rules",
        str(gelu_rules),
    )
    assert result.code == 1, result.out
    assert "verdict: not_equivalent" in result.out
    assert "mul of a partial sum over tp" in result.out


def test_an_expression_meaning_computes_its_expression():
    rules = compile_texts([("vendor.srl", GELU)])
    graph = load_graph(str(PAIR / "gelu_baseline.hlo"), rules.custom_calls)
    assert not graph.opaque_nodes()
    rng = np.random.default_rng(0)
    inputs = {i: rng.standard_normal(graph.node(i).shape) for i in graph.inputs}
    x, w1, w2 = (inputs[i] for i in graph.inputs)
    h = x @ w1
    gelu = 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h**3)))
    values = run_baseline(graph, inputs)
    np.testing.assert_allclose(values[graph.outputs[0]], gelu @ w2, rtol=1e-5, atol=1e-6)


def test_lint_compares_an_expression_with_its_reference():
    good = compile_texts([("vendor.srl", GELU)]).custom_calls["VendorGelu"]
    assert expression_problem(good) is None
    wrong = GELU.replace("0.044715", "0.44715")
    bad = compile_texts([("vendor.srl", wrong)]).custom_calls["VendorGelu"]
    problem = expression_problem(bad)
    assert problem and "differs from its reference `gelu_tanh`" in problem
    swiglu = 'custom_call "F"(a, b) = mul(mul(a, logistic(a)), b) reference swiglu\n'
    assert expression_problem(compile_texts([("f.srl", swiglu)]).custom_calls["F"]) is None


def test_lint_runs_cases_with_declared_calls_expanded(tmp_path, cli):
    # a case whose distributed side is the custom call and whose baseline is the GELU written
    # out: proved only when the case expands the call as its declaration says
    folder = tmp_path / "vendor_rules"
    (folder / "tests" / "vendor").mkdir(parents=True)
    (folder / "vendor.srl").write_text(GELU)
    shutil.copy(PAIR / "gelu_expanded.case", folder / "tests" / "vendor")
    assert cli("rules", "lint", "--fuzz", "0", "--bless", str(folder)).code == 0
    result = cli("rules", "lint", "--fuzz", "0", str(folder))
    assert result.code == 0, result.out
    assert "ok; 1 case(s) run" in result.out
    (folder / "vendor.srl").write_text(GELU.replace("0.5,", "0.25,"))
    result = cli("rules", "lint", "--fuzz", "0", "--bless", str(folder))
    assert result.code == 1
    assert "custom call `VendorGelu`: it differs from its reference" in result.out
    assert "gelu_expanded.case: error: expected equivalent" in result.out


def test_a_call_with_an_operand_the_expression_does_not_name_stays_opaque(tmp_path):
    text = (PAIR / "gelu_baseline.hlo").read_text()
    text = text.replace("custom-call(h)", "custom-call(h, x)")
    rules = compile_texts([("vendor.srl", GELU)])
    graph = parse_graph_text(text, "two_operands.hlo", rules.custom_calls)
    (opaque,) = graph.opaque_nodes()
    assert "do not fit the meaning declared at vendor.srl:2" in undeclared_note([opaque])


@pytest.mark.parametrize(
    "text, message, column",
    [
        ('custom_call "T"(x) = mul(x, y)\n', "`y` is not an operand of the call", 29),
        ('custom_call "T"(x, x) = x\n', "operand `x` is named twice", 20),
        ('custom_call "T"(x) = dot(x, x)\n', "`dot` is not an op a custom-call expression", 22),
        ('custom_call "T"(x) = compare(x, x)\n', "is not an op a custom-call expression", 22),
        ('custom_call "T"(x) = tanh(x, x)\n', "`tanh` takes 1 operand(s), not 2", 22),
        ('custom_call "T"(x) = mul[all_dims="0"](x, x)\n', "takes no attributes", 22),
        ('custom_call "T"(x) = add(x, "1")\n', "an expression's literals are numbers", 29),
        ('custom_call "T"(x) = x reference gelu_fast\n', "unknown reference `gelu_fast`", 34),
        ('custom_call "T"(x) = x reference swiglu\n', "`swiglu` takes 2 operand(s)", 34),
        ('custom_call "T" = add(0, 1)\n', "unknown custom-call meaning `add`", 19),
        ('custom_call "T" = 0.5\n', "a meaning is a fixed one over operand positions", 19),
        ('custom_call "T" = operand(0) reference identity\n', "a reference checks", 40),
    ],
)
def test_bad_expression_declarations_are_errors_at_their_column(text, message, column):
    with pytest.raises(ScalifyError) as caught:
        compile_texts([("vendor.srl", text)])
    error = caught.value
    assert message in error.message
    assert (error.path, error.line, error.column) == ("vendor.srl", 1, column)


def test_a_decimal_in_a_rule_is_an_error_at_its_column():
    text = "# r\nrule r:\n  match neg(X)\n  where 0.5 < 1\n  rewrite neg(X) == X\n"
    with pytest.raises(ScalifyError) as caught:
        compile_texts([("r.srl", text)])
    assert "a number with a point" in caught.value.message
    assert (caught.value.line, caught.value.column) == (4, 9)
