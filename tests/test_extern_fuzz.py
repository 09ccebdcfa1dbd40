"""The externs (`scalify/externs/`) are fuzzed numerically by `extern_fuzz.py`, as lint runs
it: each makes every kind of claim on its random programs and every claim holds on every
device; and each, planted unsound (a range one too narrow, an index form with a wrong stride,
a table folded one coordinate off, ...), is refuted."""

from __future__ import annotations

import pytest

from scalify.externs import device_tables, index_forms, int_ranges
from scalify.externs.index_forms import Block, IndexReader
from scalify.soundness.extern_fuzz import EXTERNS, SCALE, fuzz_extern, fuzz_externs


def test_each_extern_makes_every_kind_of_claim_and_keeps_it():
    reports = fuzz_externs(25)
    assert [r.name for r in reports] == ["int_ranges", "index_forms", "device_tables"]
    for report in reports:
        assert report.instances == SCALE * 25, report
        assert report.fired >= report.instances // 2, report.summary()
        assert all(report.claims[kind] for kind in report.kinds), report.summary()
        assert not report.unsound, report.unsound


def _narrow_add(original):
    def arithmetic(op, got):
        found = original(op, got)
        return (found[0], found[1] - 1) if op == "add" and found else found

    return arithmetic


def _narrow_iota(original):
    def node_range(node, *args):
        found = original(node, *args)
        return (0, node.shape[int(node.attrs.get("dim", 0))] - 2) if node.op == "iota" else found

    return node_range


def _lt_at_equality(original):
    def decide(direction, a, b):
        if direction == "LT" and a and b and a[1] <= b[0]:  # `<=` where `<` is meant
            return True
        return original(direction, a, b)

    return decide


def _wrong_stride(original):
    def affine(self, node):
        form = original(self, node)
        if node.op == "mul" and form is not None and form != ({node.id: 1}, 0):
            return {k: v + 1 for k, v in form[0].items()}, form[1]
        return form

    return affine


def _block_one_larger(original):
    def block_of(self, node_id):
        found = original(self, node_id)
        if found is None:
            return None
        block, negated = found
        return Block(block.index, block.coord, block.size + 1), negated

    return block_of


def _guard_one_narrower(original):
    def guarded(select, nodes):
        found = original(select, nodes)
        return None if found is None else (found[0], (0, found[1][1] - 1))

    return guarded


def _coordinate_off_by_one(original):
    def affine_in_coordinate(new, coordinate, start, step, nodes):
        return original(new, coordinate, start + step, step, nodes)  # entry c + 1, not c

    return affine_in_coordinate


def _joint_axes_swapped(original):
    def joint_offset(node, device, fit, next_id, nodes):
        start, step, axes = fit
        return original(node, device, (start, step, axes[::-1]), next_id, nodes)

    return joint_offset


def _fit_step_off(original):
    def fit(per_device, devices):
        found = original(per_device, devices)
        return None if found is None else (found[0], found[1] + 1)

    return fit


# name: (the extern refuting it, the object patched, its attribute, the planted variant)
PLANTED = {
    "an add's range one too narrow": ("int_ranges", int_ranges, "_arithmetic", _narrow_add),
    "an iota's range one too narrow": ("int_ranges", int_ranges, "_range", _narrow_iota),
    "no wrap-around check": ("int_ranges", int_ranges, "_fits", lambda _: lambda v, d: True),
    "a test decided at equality": ("int_ranges", int_ranges, "decide_compare", _lt_at_equality),
    "an index form with a wrong stride": ("index_forms", IndexReader, "_affine", _wrong_stride),
    "a block one larger": ("index_forms", IndexReader, "_block_of", _block_one_larger),
    "a guarded branch one narrower": (
        "index_forms",
        index_forms,
        "guarded_index_range",
        _guard_one_narrower,
    ),
    "a table folded one coordinate off": (
        "device_tables",
        device_tables,
        "_affine_in_coordinate",
        _coordinate_off_by_one,
    ),
    "a joint table's axes swapped": (
        "device_tables",
        device_tables,
        "_joint_offset",
        _joint_axes_swapped,
    ),
    "a scalar's step one off": ("device_tables", device_tables, "coordinate_fit", _fit_step_off),
}


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_a_planted_unsound_extern_is_refuted(monkeypatch, name):
    extern_name, owner, attribute, plant = PLANTED[name]
    monkeypatch.setattr(owner, attribute, plant(getattr(owner, attribute)))
    extern = next(e for e in EXTERNS if e.name == extern_name)
    report = fuzz_extern(extern, SCALE * 25)
    assert report.unsound, f"{name} was not refuted: {report.summary()}"
    assert report.unsound[0].startswith("seed ") and "instance: " in report.unsound[0]


def test_lint_fails_on_an_unsound_extern_and_names_it(monkeypatch):
    from scalify.soundness import lint
    from scalify.soundness.lint import LintResult

    monkeypatch.setattr(int_ranges, "_arithmetic", _narrow_add(int_ranges._arithmetic))
    result = LintResult()
    lint._fuzz_externs(result, 25, 0)
    assert result.failures == 1
    (message,) = [m for m in result.messages if "UNSOUND" in m]
    assert message.startswith("scalify/externs/int_ranges.py: error: extern `int_ranges`")
    assert "seed " in message and "instance: " in message
    assert len(result.externs) == 3 and result.externs[0].startswith("extern int_ranges: ")


def test_an_index_form_through_a_narrowing_convert_is_read_only_where_values_fit():
    """s32 values of 200 to 300 converted to s8 wrap: the convert is not read as its operand."""
    from collections import Counter

    import numpy as np

    from scalify.soundness.extern_fuzz import Program, check_index_forms

    p = Program(np.random.default_rng(0), 1, wide=False)
    x = p.input((3,), "s32", valid=(200, 300))
    p.add("convert", (x,), (3,), "s8", {"dtype": "s8"})
    assert check_index_forms(p, Counter()) == []
