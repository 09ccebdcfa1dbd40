"""Ulysses sequence parallelism (examples/ulysses), exported by JAX in the run: the tiled
all-to-alls between sequence and heads shards verify, and a wrong reshape of the all-to-all's
output is caught at its line."""

from __future__ import annotations

import pytest
from conftest import REPO, assert_caught, assert_proved, exported_at

pytest.importorskip("jax")

ULYSSES = REPO / "examples" / "ulysses"


exported = exported_at("ulysses", "sp")


def test_ulysses_block_verifies(exported):
    report = assert_proved(exported / "baseline.hlo", exported / "ulysses.hlo")
    assert report["outputs"][0]["proven"] == "shard(0, sp)"
    assert report["stats"]["rules_fired"]["all_to_all_moves_shard"] >= 4


def test_wrong_reshape_after_all_to_all_is_caught_at_its_line(exported):
    bug = "wrong_reshape_after_all_to_all"
    base, dist = exported / "baseline.hlo", exported / f"ulysses_{bug}.hlo"
    assert_caught(base, dist, ULYSSES / "model.py", bug)
