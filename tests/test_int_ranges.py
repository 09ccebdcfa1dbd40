"""Integer ranges: a test is folded only when every value in the ranges decides it, a range
is dropped where arithmetic could wrap around, and only lookup indices are assumed in range."""

from __future__ import annotations

from scalify.frontends import parse_graph_text


def load(body: str):
    return parse_graph_text("HloModule m\nENTRY main {\n" + body + "\n}\n", "m.hlo")


def output(graph):
    (out,) = [graph.node(o) for o in graph.outputs]
    return out


CLIPPED = """  i = s32[4] parameter(0)
  lo = s32[] constant(0)
  hi = s32[] constant(7)
  c = s32[4] clamp(lo, i, hi)
  z = s32[] constant(0)
  zero = s32[4] broadcast(z), dimensions={}
  neg = pred[4] compare(c, zero), direction=LT
  w = s32[4] add(c, c)
  ROOT s = s32[4] select(neg, w, c)"""


def test_a_test_every_value_decides_is_folded():
    """A clipped index is never negative: JAX's wrap `i < 0 ? i + n : i` is the index."""
    out = output(load(CLIPPED))
    assert out.op == "clamp"


def test_a_test_some_values_decide_otherwise_stays():
    out = output(load(CLIPPED.replace("lo = s32[] constant(0)", "lo = s32[] constant(-3)")))
    assert out.op == "select"


def test_a_range_that_could_wrap_around_decides_nothing():
    """r * 2^30 in s32 can wrap to a negative number: the `< 0` test must stay."""
    out = output(
        load(
            """  r = s32[] parameter(0)
  lo = s32[] constant(0)
  hi = s32[] constant(3)
  c = s32[] clamp(lo, r, hi)
  big = s32[] constant(1073741824)
  m = s32[] multiply(c, big)
  ROOT t = pred[] compare(m, lo), direction=LT"""
        )
    )
    assert out.op == "compare"


def test_only_a_lookup_index_input_is_assumed_in_range():
    graph = load(
        """  t = f32[16,4] parameter(0)
  i = s32[3] parameter(1)
  j = s32[3] parameter(2)
  iv = s32[3,1] reshape(i)
  g = f32[3,4] gather(t, iv), offset_dims={1}, collapsed_slice_dims={0}, """
        """start_index_map={0}, index_vector_dim=1, slice_sizes={1,4}
  f = f32[3] convert(j)
  fb = f32[3,4] broadcast(f), dimensions={0}
  ROOT o = f32[3,4] add(g, fb)"""
    )
    ranges = {graph.input_name(i): graph.node(i).attrs.get("assumed_range") for i in graph.inputs}
    assert ranges == {"t": None, "i": (0, 15), "j": None}


def test_an_index_under_a_transpose_and_a_start_of_zero_is_assumed_in_range():
    """Megatron's cross-entropy at tensor-parallel size 1: its target, transposed, less the
    block start 0, looks up the logits (one entry per row)."""
    import pytest

    torch = pytest.importorskip("torch")
    from scalify.canon.canonicalize import canonicalize
    from scalify.capture.fx_trace import trace
    from scalify.frontends.fx import graph_from_fx

    def predicted(logits, labels):
        local = labels.t() - 0
        return logits.gather(1, local)

    gm = trace(predicted, (torch.randn(2, 16), torch.randint(0, 16, (1, 2))))
    graph = canonicalize(graph_from_fx(gm, "<memory>"))
    ranges = {graph.input_name(i): graph.node(i).attrs.get("assumed_range") for i in graph.inputs}
    assert list(ranges.values()) == [None, (0, 15)], ranges


GUARDED = """  i = s32[4] parameter(0)
  r = s32[] partition-id()
  one = s32[] constant(1)
  two = s32[] constant(2)
  q = s32[] divide(r, one)
  c = s32[] remainder(q, two)
  size = s32[] constant(8)
  start = s32[] multiply(c, size)
  starts = s32[4] broadcast(start), dimensions={}
  end = s32[] add(start, size)
  ends = s32[4] broadcast(end), dimensions={}
  below = pred[4] compare(i, starts), direction=LT
  above = pred[4] compare(i, ends), direction=GE
  outside = pred[4] or(below, above)
  local = s32[4] subtract(i, starts)
  z = s32[] constant(0)
  zero = s32[4] broadcast(z), dimensions={}
  guarded = s32[4] select(outside, zero, local)
  seven = s32[] constant(7)
  last = s32[4] broadcast(seven), dimensions={}
  ROOT t = pred[4] compare(guarded, last), direction=LE"""


def test_a_guarded_local_index_lies_in_its_block():
    """`select(i outside block r, 0, i - 8r)` is in [0, 8) wherever it is taken (Megatron's
    vocab-parallel embedding guards its local index so): `<= 7` holds everywhere."""
    graph = load(GUARDED)
    out = output(graph)
    assert out.op == "broadcast", out
    assert graph.node(out.operands[0]).attrs["value"] == "true"


def test_a_guard_that_is_not_the_blocks_decides_nothing():
    """The branch taken is `i - 8r + 1`, which reaches 8 inside the block: the test stays."""
    body = GUARDED.replace(
        "  guarded = s32[4] select(outside, zero, local)",
        "  ones = s32[4] broadcast(one), dimensions={}\n"
        "  shifted = s32[4] add(local, ones)\n"
        "  guarded = s32[4] select(outside, zero, shifted)",
    )
    assert output(load(body)).op == "compare"
