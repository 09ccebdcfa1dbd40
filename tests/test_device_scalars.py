"""Integer scalars computed from the device id alone, written as the affine form they take
on every device (`device_tables.fold_device_scalars`): any spelling of `(r // 2) * 4` reads
as one form, and a value the same on every device is left as its program wrote it."""

from __future__ import annotations

from scalify.canon.canonicalize import canonicalize
from scalify.frontends import parse_graph_text


def _sliced_at(offset: str) -> str:
    """x sliced along dim 1 at an offset `offset` computes from r (the s32 device id)."""
    return f"""HloModule m, num_partitions=4
ENTRY main {{
  x = f32[2,8] parameter(0)
  pid = u32[] partition-id()
  r = s32[] convert(pid)
  zero = s32[] constant(0)
  two = s32[] constant(2)
  four = s32[] constant(4)
{offset}
  ROOT s = f32[2,4] dynamic-slice(x, zero, off), dynamic_slice_sizes={{2,4}}
}}
"""


def _offset_ops(text: str) -> set[str]:
    graph = canonicalize(parse_graph_text(text, "m.hlo"))
    (out,) = graph.outputs
    seen, todo = set(), [graph.node(out).operands[1]]
    while todo:
        node = graph.node(todo.pop())
        seen.add(node.op)
        todo += node.operands
    return seen


def test_a_floor_division_spelled_with_selects_reads_as_the_group_coordinate():
    """JAX's `r // 2`: a select on the signs and the remainder, then times 4."""
    ops = _offset_ops(
        _sliced_at("""  q = s32[] divide(r, two)
  sr = s32[] sign(r)
  s2 = s32[] sign(two)
  differ = pred[] compare(sr, s2), direction=NE
  rest = s32[] remainder(r, two)
  inexact = pred[] compare(rest, zero), direction=NE
  down = pred[] and(differ, inexact)
  one = s32[] constant(1)
  below = s32[] subtract(q, one)
  g = s32[] select(down, below, q)
  off = s32[] multiply(g, four)""")
    )
    assert ops == {"mul", "convert", "rem", "div", "rank_index", "constant"}


def test_a_value_the_same_on_every_device_keeps_its_ops():
    """`r * r < 3 ? 4 : 4` is 4 on each of the 4 devices (a test no integer range decides):
    no block to read, left as written, so a report can still name its line."""
    ops = _offset_ops(
        _sliced_at("""  three = s32[] constant(3)
  square = s32[] multiply(r, r)
  low = pred[] compare(square, three), direction=LT
  off = s32[] select(low, four, four)""")
    )
    assert {"select", "compare"} <= ops
