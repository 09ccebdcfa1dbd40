"""What a rule author adds without Python, each in a scratch copy of the shipped rules:

- an op the registry declares (`tan`: one registry line, and HLO's opcode of the same name
  maps to it) joins the `elementwise` family with one `.srl` edit, and the shard rules then
  carry it, numerically checked;
- a new scheme file (`extrema.srl`: `min` of two partial minima) with its cases and golden
  file (`tests/rule_additions/extrema/`), which proves a pair no shipped rule proves.

Lint is clean on each folder: every file compiles, every golden file matches, every case keeps
its promises and every rule has a must-fire and a near-miss case."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from conftest import REPO, rules_plus
from scalify.compiler.compile import CompiledRuleSet, compile_rule_dir

from scalify.soundness import fuzz
from scalify.soundness.cases import read_case, run_case
from scalify.soundness.lint import lint_rules

ADDITIONS = REPO / "tests" / "rule_additions"
ELEMENTWISE = "family elementwise = neg,"


def _lint_clean(folder: Path) -> None:
    result = lint_rules(folder, bless=False, fuzz=0)
    assert result.failures == 0, "\n".join(result.messages)


def _case(folder: Path, rule_file: str, name: str):
    return read_case(folder / "tests" / rule_file / f"{name}.case")


def _fuzzed(rules: CompiledRuleSet, rule: str, ops: list[str], monkeypatch, budget: int = 25):
    """The fuzzer's report on one rule of `rules` alone, its instances drawn over `ops`."""
    files = [replace(f, rules=[r for r in f.rules if r.name == rule]) for f in rules.files]
    monkeypatch.setattr(fuzz, "_ops_of", lambda name, rules: ops)
    (report,) = [r for r in fuzz.fuzz_rules(replace(rules, files=files), budget) if r.name == rule]
    return report


@pytest.fixture(scope="module")
def shipped() -> CompiledRuleSet:
    return compile_rule_dir(REPO / "rules")


# ---- a new op: `tan` -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tan_rules(tmp_path_factory) -> Path:
    """The shipped rules, `tan` in their `elementwise` family, and its two cases."""
    folder = rules_plus(tmp_path_factory.mktemp("tan") / "rules", ADDITIONS / "tan")
    core = folder / "core.srl"
    assert ELEMENTWISE in core.read_text() and " tan," not in core.read_text()
    core.write_text(core.read_text().replace(ELEMENTWISE, ELEMENTWISE + " tan,", 1))
    return folder


def test_a_new_op_in_the_elementwise_family_lints_clean(tan_rules):
    _lint_clean(tan_rules)


def test_a_tan_of_a_shard_is_proved_only_with_the_family_line(tan_rules, shipped):
    case = _case(tan_rules, "core", "tan_shard")
    report, problems = run_case(case, compile_rule_dir(tan_rules))
    assert not problems and report.verdict == "equivalent"
    report, _ = run_case(case, shipped)
    assert report.verdict != "equivalent"


def test_a_tan_of_a_partial_sum_is_not_proved(tan_rules):
    case = _case(tan_rules, "core", "tan_of_partial_sum_near_miss")
    report, problems = run_case(case, compile_rule_dir(tan_rules))
    assert not problems and report.verdict == "not_equivalent"
    assert report.counterexample


def test_the_shard_rule_is_sound_on_random_tans(tan_rules, monkeypatch):
    rules = compile_rule_dir(tan_rules)
    report = _fuzzed(rules, "elementwise_shard_unary", ["tan"], monkeypatch)
    assert report.fired and not report.unsound, report.unsound[:1]


# ---- a new scheme file: `extrema.srl` --------------------------------------------------------


@pytest.fixture(scope="module")
def extrema_rules(tmp_path_factory) -> Path:
    return rules_plus(tmp_path_factory.mktemp("extrema") / "rules", ADDITIONS / "extrema")


def test_a_new_scheme_file_lints_clean(extrema_rules):
    _lint_clean(extrema_rules)


def test_the_scheme_proves_a_pair_no_shipped_rule_proves(extrema_rules, shipped):
    case = _case(extrema_rules, "extrema", "min_partial")
    report, problems = run_case(case, compile_rule_dir(extrema_rules))
    assert not problems and report.verdict == "equivalent"
    assert "min_partial" in report.stats["rules_fired"]
    report, _ = run_case(case, shipped)
    assert report.verdict == "unknown"  # correct, and a rule is missing


def test_the_scheme_s_near_miss_is_not_proved(extrema_rules):
    case = _case(extrema_rules, "extrema", "min_partial_of_sums_near_miss")
    report, problems = run_case(case, compile_rule_dir(extrema_rules))
    assert not problems and report.verdict == "not_equivalent"


def test_the_scheme_s_rule_is_sound_on_random_instances(extrema_rules, monkeypatch):
    report = _fuzzed(compile_rule_dir(extrema_rules), "min_partial", ["min"], monkeypatch)
    assert report.fired and not report.unsound, report.unsound[:1]


WRONG = """
# WRONG on purpose: merged partial minima read as a partial maximum
rule min_partial_as_max:
  match   min(X, Y)
  where   X ~ x @ partial(min, a)
          Y ~ y @ partial(min, a)
  rewrite min(X, Y) ~ min(x, y) @ partial(max, a)
"""


def test_the_fuzzer_draws_partial_minima_and_refutes_a_wrong_rule_over_them(
    extrema_rules, monkeypatch
):
    (extrema_rules / "extrema.srl").write_text(WRONG)
    try:
        rules = compile_rule_dir(extrema_rules)
    finally:  # the folder is shared by the module's tests
        shipped = (ADDITIONS / "extrema" / "extrema.srl").read_text()
        (extrema_rules / "extrema.srl").write_text(shipped)
    report = _fuzzed(rules, "min_partial_as_max", ["min"], monkeypatch)
    assert report.unsound and "partial(min, " in report.unsound[0]
