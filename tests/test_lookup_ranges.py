"""A masked lookup into a device's block of a table equals the whole table's lookup only for
indices inside the table: proved for an input index (assumed in range, and the report says
so), never for a computed index nothing bounds."""

from __future__ import annotations

import pytest
from conftest import assert_proved, exported_programs, verify_json

pytest.importorskip("jax")


programs = exported_programs("lookup_ranges")


def test_an_input_index_is_assumed_in_range_and_proved(programs):
    report = assert_proved(programs / "input/baseline.hlo", programs / "input/tp.hlo")
    assert any("assumed: input `a`" in note for note in report["notes"]), report["notes"]


def test_a_computed_index_nothing_bounds_is_not_proved(programs):
    code, report = verify_json(programs / "computed/baseline.hlo", programs / "computed/tp.hlo")
    assert report["verdict"] != "equivalent"
