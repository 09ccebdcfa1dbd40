"""Padded and repeated values under a shard: the layout text, its checks against the shapes,
what each device holds, and the layouts inferred where the degree divides no size."""

from __future__ import annotations

import numpy as np
import pytest

from scalify.errors import ScalifyError
from scalify.layout import layout_str, local_shape, parse_layout
from scalify.mesh import parse_mesh
from scalify.relations import _from_shapes, check_shape
from scalify.simulate.spmd import compare_output, distribute

MESH = parse_mesh("tp=6")


def test_padded_and_repeated_layouts_read_and_print_back():
    text = "repeated(2, 4) padded(2, 36) shard(2, tp)"
    layout = parse_layout(text, MESH)
    assert layout_str(layout) == text
    assert local_shape((64, 4, 8, 64), layout, MESH) == (64, 4, 6, 64)
    parts = "shard(1, tp, parts=[2048 padded(1, 2304), 512 repeated(1, 4, 64) padded(1, 2304)])"
    assert layout_str(parse_layout(parts, MESH)) == parts
    assert local_shape((2048, 2560), parse_layout(parts, MESH), MESH) == (2048, 768)


@pytest.mark.parametrize(
    "text, base, words",
    [
        ("padded(1, 6) shard(1, tp)", (4, 8), "shorter than dim 1"),
        ("repeated(1, 2, 3) shard(1, tp)", (4, 8), "whole runs of 3"),
        ("padded(1, 10) shard(1, tp)", (4, 8), "does not divide dim 1 (size 10)"),
    ],
)
def test_layouts_that_do_not_fit_the_shape_are_refused(text, base, words):
    with pytest.raises(ScalifyError, match=words.replace("(", r"\(").replace(")", r"\)")):
        check_shape(parse_layout(text, MESH), base, base, MESH, "here")


def test_a_padded_layout_with_a_unit_is_refused():
    with pytest.raises(ScalifyError, match="padded takes"):
        parse_layout("padded(1, 6, 2) shard(1, tp)", MESH)


def test_a_repeat_of_once_is_refused():
    """It repeats nothing, and a value that is its own repeat feeds the repeat rules forever."""
    with pytest.raises(ScalifyError, match="repeats at least twice"):
        parse_layout("repeated(1, 1) shard(1, tp)", MESH)


KV = "512 repeated(1, 4, 64) padded(1, 2304)"


@pytest.mark.parametrize(
    "first, words",
    [
        ("2048 padded(1, 100)", "padded(1, 100) is shorter than dim 1 (size 2048)"),
        ("2048 padded(0, 2304)", "along dim 1, the dim of the parts"),
        ("2048 repeated(1, 2, 7)", "to be whole runs of 7"),
    ],
)
def test_part_values_that_do_not_fit_their_part_are_refused(first, words):
    layout = parse_layout(f"shard(1, tp, parts=[{first}, {KV}, {KV}])", MESH)
    with pytest.raises(ScalifyError) as info:
        check_shape(layout, (2048, 3072), (2048, 1152), MESH, "here")
    assert words in str(info.value)


def test_each_device_holds_its_block_of_the_repeated_padded_value():
    heads = np.arange(8.0).reshape(1, 8)  # 8 KV heads, each repeated 4 times, padded to 36
    blocks = distribute(
        heads, parse_layout("repeated(1, 4) padded(1, 36) shard(1, tp)", MESH), MESH, None
    )
    assert blocks[0].tolist() == [[0, 0, 0, 0, 1, 1]]
    assert blocks[5].tolist() == [[7, 7, 0, 0, 0, 0]]


def test_an_output_padding_is_not_compared():
    value = np.arange(5.0).reshape(1, 5)
    layout = parse_layout("padded(1, 6) shard(1, tp)", parse_mesh("tp=2"))
    found = [np.array([[0.0, 1, 2]]), np.array([[3.0, 4, 99]])]  # the padding holds 99
    assert compare_output(0, value, found, layout, parse_mesh("tp=2"), None) is None
    found[1][0, 1] = 5.0
    assert compare_output(0, value, found, layout, parse_mesh("tp=2"), None) is not None


@pytest.mark.parametrize(
    "base, local, expected",
    [
        ((2048, 8192), (2048, 1366), "padded(1, 8196) shard(1, tp)"),  # the MLP width
        ((64, 4, 8, 64), (64, 4, 6, 64), "repeated(2, 4) padded(2, 36) shard(2, tp)"),  # caches
        ((2048, 2048), (2048, 384), "padded(1, 2304) shard(1, tp)"),  # 32 heads of 64 in 36
        ((128256, 8), (21376, 8), "shard(0, tp)"),
    ],
)
def test_layouts_are_inferred_where_the_degree_divides_no_size(base, local, expected):
    assert layout_str(_from_shapes(base, local, MESH, "here")) == expected


def test_a_block_of_padding_alone_is_not_inferred():
    with pytest.raises(ScalifyError, match="not a multiple"):
        _from_shapes((4, 10), (4, 3), MESH, "here")  # 18 places for 10: whole blocks of padding


def test_padded_weights_and_outputs_are_read_from_annotations(tmp_path):
    """A vocabulary of 14 padded to 16 over tp=4 (a converter's LM head), stated only by
    the annotations: the weight's and the logits' blocks add up to more than the baseline's
    dim, so both are the padded value's shards; the padding's zeros are named as assumed."""
    from conftest import REPO

    from scalify.verify import verify_files

    base = tmp_path / "base.hlo"
    base.write_text(
        """HloModule base
ENTRY main {
  h = f32[2,8] parameter(0)
  w = f32[8,14] parameter(1)
  ROOT l = f32[2,14] dot(h, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""
    )
    dist = tmp_path / "dist.hlo"
    dot = "dot(h, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}"
    dist.write_text(
        "HloModule dist, num_partitions=4\nENTRY main {\n"
        "  h = f32[2,8] parameter(0), sharding={replicated}\n"
        "  w = f32[8,4] parameter(1), sharding={devices=[1,4]<=[4]}\n"
        f"  ROOT l = f32[2,4] {dot}, sharding={{devices=[1,4]<=[4]}}\n}}\n"
    )
    report = verify_files(str(base), str(dist), REPO / "rules", mesh="tp=4")
    assert report.verdict == "equivalent", report.suspects[:1]
    padded = "padded(1, 16) shard(1, tp)"
    assert f"w: {padded} (annotation; its padding assumed to hold zeros)" in "\n".join(
        report.relations["inputs"]
    )
    assert report.outputs[0].expected == padded
