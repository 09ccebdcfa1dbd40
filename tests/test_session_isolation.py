"""Proofs share one e-graph session (the rules are loaded once per process), so each must
start from the rules alone: a proof's verdict may not depend on the proofs run before it.

The sequence below is the one that exposed it: with each graph node named by an egglog `let`
(a table declared between `(push)` and `(pop)`), the last proof lost congruences and came
back `unknown` after these eleven, and `equivalent` alone."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("jax")

from conftest import REPO, export_example, verify_json  # noqa: E402
from test_merged_batches import (  # noqa: E402
    _check,
    _check_gradients,
    gradients,
    heads_major_q,
    scores,
    split_the_other_way,
)


def test_a_proof_does_not_depend_on_the_proofs_run_before_it(tmp_path):
    for sp in (2, 4):
        out = export_example(
            REPO / "examples/ulysses/export.py", tmp_path / f"sp{sp}", "--sp", str(sp)
        )
        for distributed in ("ulysses.hlo", "ulysses_wrong_reshape_after_all_to_all.hlo"):
            verify_json(out / "baseline.hlo", out / distributed)
    for tp in (2, 4):
        _check(scores, tp)
    for parallel in (heads_major_q, split_the_other_way):
        _check(parallel)
    _check_gradients(gradients, 2)
    report = _check_gradients(gradients, 4)
    assert report.verdict == "equivalent", [s.reason for s in report.suspects[:2]]
