"""Folding index arithmetic on integer constants: exact, and never across a wrap-around."""

from __future__ import annotations

import pytest

from scalify.frontends import parse_graph_text


def fold(body: str):
    text = "HloModule m\nENTRY main {\n" + body + "\n}\n"
    return parse_graph_text(text, "m.hlo")


def test_counter_arithmetic_folds_and_a_dynamic_slice_becomes_static():
    graph = fold(
        """  w = f32[4,8] parameter(0)
  zero = s32[] constant(0)
  one = s32[] constant(1)
  i = s32[] add(one, one)
  ROOT s = f32[1,8] dynamic-slice(w, i, zero), dynamic_slice_sizes={1,8}"""
    )
    (out,) = [graph.node(o) for o in graph.outputs]
    assert out.op == "slice" and out.attrs["starts"] == (2, 0) and out.attrs["limits"] == (3, 8)


def test_a_start_past_the_end_is_clamped_as_hlo_clamps_it():
    graph = fold(
        """  w = f32[4,8] parameter(0)
  zero = s32[] constant(0)
  big = s32[] constant(9)
  ROOT s = f32[2,8] dynamic-slice(w, big, zero), dynamic_slice_sizes={2,8}"""
    )
    (out,) = [graph.node(o) for o in graph.outputs]
    assert out.attrs["starts"] == (2, 0)


def test_arithmetic_that_wraps_around_is_not_folded():
    graph = fold(
        """  a = u8[] constant(200)
  b = u8[] constant(100)
  ROOT c = u8[] add(a, b)"""
    )
    (out,) = [graph.node(o) for o in graph.outputs]
    assert out.op == "add"  # 300 does not fit in u8: left to the simulator's wrap-around


@pytest.mark.parametrize(
    ("dtype", "a", "b", "joined"),
    [("s32", 2, 8, "16"), ("s8", 16, 16, None)],  # 256 is no s8: left apart
    ids=["joined", "product_does_not_fit"],
)
def test_nested_constant_factors_of_an_offset(dtype, a, b, joined):
    """`rank * 2 * 8` reads as `rank * 16`, the one-factor offset the slice rules match,
    when the product fits the dtype."""
    graph = fold(
        f"""  r = {dtype}[] parameter(0)
  a = {dtype}[] constant({a})
  b = {dtype}[] constant({b})
  ra = {dtype}[] multiply(r, a)
  ROOT o = {dtype}[] multiply(ra, b)"""
    )
    (out,) = [graph.node(o) for o in graph.outputs]
    inner, factor = (graph.node(o) for o in out.operands)
    if joined:
        assert out.op == "mul" and inner.op == "parameter" and factor.attrs["value"] == joined
    else:
        assert inner.op == "mul"
