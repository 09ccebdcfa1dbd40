"""Folding index arithmetic on integer constants: exact, and never across a wrap-around."""

from __future__ import annotations

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


def test_nested_constant_factors_of_an_offset_are_joined():
    """`rank * 2 * 8` reads as `rank * 16`, the one-factor offset the slice rules match."""
    graph = fold(
        """  r = s32[] parameter(0)
  two = s32[] constant(2)
  eight = s32[] constant(8)
  r2 = s32[] multiply(r, two)
  ROOT o = s32[] multiply(r2, eight)"""
    )
    (out,) = [graph.node(o) for o in graph.outputs]
    assert out.op == "mul" and graph.node(out.operands[0]).op == "parameter"
    assert graph.node(out.operands[1]).attrs["value"] == "16"


def test_factors_whose_product_does_not_fit_are_left_apart():
    graph = fold(
        """  r = s8[] parameter(0)
  a = s8[] constant(16)
  b = s8[] constant(16)
  ra = s8[] multiply(r, a)
  ROOT o = s8[] multiply(ra, b)"""
    )
    (out,) = [graph.node(o) for o in graph.outputs]
    assert graph.node(out.operands[0]).op == "mul"  # 256 is no s8
