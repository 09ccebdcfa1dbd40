"""An integer value computed from literals alone is written as the count or fill it is
(`scalify/literal_arrays.py`); a value that is neither keeps its ops."""

from __future__ import annotations

from scalify.canonicalize import canonicalize
from scalify.frontends import parse_graph_text


def canonical(body: str):
    text = "HloModule m\nENTRY main {\n" + body + "\n}\n"
    return canonicalize(parse_graph_text(text, "m.hlo"))


def _read_by_a_table(count: str) -> str:
    """`count` (an s32[2,8] value named `pos`) looks up rows of a parameter table."""
    gather = (
        "gather(t, pos), offset_dims={2}, collapsed_slice_dims={0}, start_index_map={0}, "
        "index_vector_dim=2, slice_sizes={1,4}"
    )
    return f"""  t = f32[16,4] parameter(0)
{count}
  ROOT r = f32[2,8,4] {gather}"""


def _positions(graph):
    (out,) = [graph.node(o) for o in graph.outputs]
    return out


def test_positions_made_by_arithmetic_on_literals_are_one_count():
    """ones, a running sum by hand (2 * iota + 1 - iota - 1 + 3 = iota + 3): the count 3..10
    for every row, whatever ops made it."""
    graph = canonical(
        _read_by_a_table(
            """  i = s32[2,8] iota(), iota_dimension=1
  two = s32[] constant(2)
  b2 = s32[2,8] broadcast(two), dimensions={}
  twice = s32[2,8] multiply(i, b2)
  three = s32[] constant(3)
  b3 = s32[2,8] broadcast(three), dimensions={}
  shifted = s32[2,8] add(twice, b3)
  pos = s32[2,8] subtract(shifted, i)"""
        )
    )
    ops = {n.op for n in graph.nodes.values()}
    assert "sub" not in ops and "mul" not in ops, sorted(ops)
    counts = [n for n in graph.nodes.values() if n.op == "iota"]
    assert [c.shape for c in counts] == [(8,)]  # one count, no batch size in it


def test_a_value_that_is_no_count_keeps_its_ops():
    """i * i along the row is not an arithmetic count: left as computed."""
    graph = canonical(
        _read_by_a_table(
            """  i = s32[2,8] iota(), iota_dimension=1
  pos = s32[2,8] multiply(i, i)"""
        )
    )
    assert any(n.op == "mul" for n in graph.nodes.values())
