"""A value moved from one split dim to another by XLA's SPMD partitioner (columns to rows
and back, over one mesh axis or two at once) is proved: XLA inserts a unit dim, splits the
dim it hands out and exchanges that split with an all-to-all, which folds to the one
exchange the rules read. The same modules with the all-to-all among the devices of another
axis are not proved.

And two ways DeepSeek's attention (EasyDeL's) is written: a head built by writing its
parts into zeros at static offsets (read as their concatenation), and positions counted
in floats on each device's block (read as its block of the whole count), over one axis or
over two at once in another order than the mesh's."""

from __future__ import annotations

import re

import pytest
from conftest import exported_programs, verify_json

pytest.importorskip("jax")

programs = exported_programs("xla_reshards")
MESH = "fsdp=2,tp=2,sp=2"
RESHARDS = ["columns_to_rows", "rows_to_columns", "rows_to_both", "swap"]


@pytest.mark.parametrize("name", RESHARDS)
def test_a_reshard_by_all_to_all_is_proved(programs, name):
    code, report = verify_json(
        programs / f"{name}_baseline.hlo", programs / f"{name}.hlo", "--mesh", MESH
    )
    assert (code, report["verdict"]) == (0, "equivalent"), report["suspects"]
    assert "all_to_all_moves_shard" in report["stats"]["rules_fired"]


@pytest.mark.parametrize("name", RESHARDS)
def test_an_all_to_all_among_another_axis_is_not_proved(programs, name, tmp_path):
    text = (programs / f"{name}.hlo").read_text()
    exchange = re.search(
        r"all-to-all\(.*?replica_groups=mesh\[([^\]]*)\][^{]*\{'(axis_\d)'\}", text
    )
    assert exchange is not None
    sizes = dict(re.findall(r"'(axis_\d)'=(\d+)", exchange.group(1)))
    used = exchange.group(2)
    other = next(a for a, n in sizes.items() if a != used and n == sizes[used])
    start, end = exchange.span(2)
    broken = tmp_path / "broken.hlo"
    broken.write_text(text[:start] + other + text[end:])
    code, report = verify_json(programs / f"{name}_baseline.hlo", broken, "--mesh", MESH)
    assert code == 1 and report["verdict"] != "equivalent", report["verdict"]


@pytest.mark.parametrize("name", ["parts_written", "float_positions", "positions_two_axes"])
def test_deepseek_spellings_are_proved(programs, name):
    code, report = verify_json(
        programs / f"{name}_baseline.hlo", programs / f"{name}.hlo", "--mesh", MESH
    )
    assert (code, report["verdict"]) == (0, "equivalent"), report["suspects"]


@pytest.mark.parametrize(
    "name, right, wrong",
    [
        # the rope part written over the end of the other part (it still fits in the head)
        ("parts_written", "constant({16})", "constant({8})"),
        ("parts_written", "constant({16})", "constant({12})"),
        # each device's float count shifted by a step other than its block's size
        ("float_positions", "s32[] constant(32)", "s32[] constant(16)"),
        ("float_positions", "s32[] constant(32)", "s32[] constant(33)"),
        # positions over two axes counted with tp the more significant (the mesh's order)
        (
            "positions_two_axes",
            "constant({0, 2, 1, 3, 0, 2, 1, 3})",
            "constant({0, 1, 2, 3, 0, 1, 2, 3})",
        ),
    ],
)
def test_a_part_or_a_count_at_another_offset_is_not_proved(programs, name, right, wrong, tmp_path):
    text = (programs / f"{name}.hlo").read_text()
    assert text.count(right) == 1
    broken = tmp_path / "broken.hlo"
    broken.write_text(text.replace(right, wrong))
    code, report = verify_json(programs / f"{name}_baseline.hlo", broken, "--mesh", MESH)
    assert code == 1 and report["verdict"] == "not_equivalent", report["verdict"]
