"""A `not_equivalent` verdict always carries its witness: a counterexample the simulator ran,
or a refutation by the rules. A known bug's pattern at the frontier with neither is a lead,
and the verdict is `unknown` (issue: definite verdicts without a witness on real graphs)."""

from __future__ import annotations

from conftest import MLP, verify_json


def test_a_bug_the_simulator_can_run_has_a_counterexample() -> None:
    code, report = verify_json(
        MLP / "hlo" / "baseline.hlo", MLP / "hlo" / "tp_bias_before_allreduce.hlo"
    )
    assert (code, report["verdict"]) == (1, "not_equivalent")
    assert report["counterexample"]


def test_without_simulation_a_pattern_alone_is_no_witness() -> None:
    code, report = verify_json(
        MLP / "hlo" / "baseline.hlo", MLP / "hlo" / "tp_bias_before_allreduce.hlo", "--no-simulate"
    )
    assert (code, report["verdict"]) == (1, "unknown")
    assert report["suspects"], "the lead is still reported"
    assert any("no witness" in n for n in report["notes"])
