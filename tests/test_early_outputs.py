"""An output equal to a value the baseline computes before its output: the finding names
that value and the baseline's next step, with its line (a division by the number of
micro-batches forgotten)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from scalify.api import check_equivalent, fake_mesh  # noqa: E402

HERE = "tests/test_early_outputs.py"


def accumulated(x):
    total = x[:4].square().sum(0) + x[4:].square().sum(0)
    return total / 2  # MEAN: the baseline divides by the number of micro-batches


def accumulated_undivided(x):
    return x[:4].square().sum(0) + x[4:].square().sum(0)


def test_an_output_short_of_the_baseline_s_last_step_names_it():
    report = check_equivalent(
        accumulated, accumulated_undivided, mesh=fake_mesh("tp=2"),
        example_inputs=(torch.randn(8, 4),),
    )  # fmt: skip
    assert report.verdict == "not_equivalent" and report.counterexample
    (first,) = report.suspects
    mean_line = next(
        i for i, text in enumerate(open(__file__).read().splitlines(), 1) if "# MEAN" in text
    )
    assert "a value the baseline computes before its output" in first.reason, first.reason
    assert f"div `div` ({HERE}:{mean_line})" in first.reason, first.reason
