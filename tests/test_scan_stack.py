"""A layer stack written with `lax.scan` (examples/scan_stack), exported by JAX in the run:
the HLO `while` is unrolled, each iteration's weight slices key alike, so a deep stack is
proved once per distinct layer; bugs in the loop body are caught at their line."""

from __future__ import annotations

import pytest
from conftest import REPO, caught_at, exported_at, verify_json

pytest.importorskip("jax")

SCAN = REPO / "examples" / "scan_stack"


exported = exported_at("scan_stack", "tp", (2, 4), "--layers", "32")


def test_scanned_stack_verifies_with_one_proof_per_distinct_layer(exported):
    code, report = verify_json(exported / "baseline.hlo", exported / "tp.hlo")
    assert (code, report["verdict"]) == (0, "equivalent")
    stats = report["stats"]
    assert stats["partitions"] >= 32
    assert stats["memo_hits"] >= stats["partitions"] - 4  # the 32 iterations share a proof


@pytest.mark.parametrize("bug", ["missing_allreduce", "residual_inside_allreduce"])
def test_bug_in_the_loop_body_is_caught_at_its_line(exported, bug):
    code, report = verify_json(exported / "baseline.hlo", exported / f"tp_{bug}.hlo")
    assert code == 1 and report["verdict"] == "not_equivalent"
    assert caught_at(report, SCAN / "model.py", bug)


LOOP = """HloModule m
cond {
  t = (s32[], f32[8]) parameter(0)
  i = s32[] get-tuple-element(t), index=0
  ROOT lt = pred[] compare(i, BOUND), direction=LT
}
body {
  t = (s32[], f32[8]) parameter(0)
  i = s32[] get-tuple-element(t), index=0
  one = s32[] constant(1)
  next = s32[] add(i, one)
  x = f32[8] get-tuple-element(t), index=1
  y = f32[8] tanh(x)
  ROOT r = (s32[], f32[8]) tuple(next, y)
}
ENTRY main {
  x = f32[8] parameter(0)
  n = s32[] parameter(1)
  zero = s32[] constant(0)
  init = (s32[], f32[8]) tuple(zero, x)
  w = (s32[], f32[8]) while(init), condition=cond, body=body
  ROOT out = f32[8] get-tuple-element(w), index=1
}
"""


def test_only_loops_with_a_static_trip_count_are_unrolled(tmp_path):
    from scalify.frontends import parse_graph_text

    static = LOOP.replace("BOUND", "k").replace("  ROOT lt", "  k = s32[] constant(3)\n  ROOT lt")
    unrolled = parse_graph_text(static, "static.hlo")
    assert [n.op for n in unrolled.nodes.values()].count("tanh") == 3
    dynamic = parse_graph_text(LOOP.replace("BOUND", "i").replace("(i, i)", "(i, i)"), "d.hlo")
    assert any(n.op == "opaque" for n in dynamic.nodes.values())


def test_a_loop_too_large_to_unroll_stays_opaque():
    from scalify.frontends import parse_graph_text

    huge = LOOP.replace("BOUND", "k").replace(
        "  ROOT lt", "  k = s32[] constant(100000)\n  ROOT lt"
    )
    graph = parse_graph_text(huge, "huge.hlo")
    assert [n.op for n in graph.nodes.values()].count("tanh") == 0
    assert any(n.op == "opaque" for n in graph.nodes.values())


SLICED = """HloModule {name}
ENTRY main {{
  w = f32[4,8] parameter(0)
  s = f32[1,8] slice(w), slice={{[{start}:{stop}], [0:8]}}
  ROOT t = f32[1,8] tanh(s)
}}
"""


def test_slice_offsets_key_relative_to_the_segment_but_never_apart():
    """Layer k's slices key like layer 0's when both graphs slice the same layer; a
    distributed slice of another layer than the baseline's keys differently."""
    from scalify.engine.partition import structural_key
    from scalify.frontends import parse_graph_text

    def key(base_start: int, dist_start: int) -> str:
        base, dist = (
            parse_graph_text(SLICED.format(name=n, start=k, stop=k + 1), f"{n}.hlo")
            for n, k in (("b", base_start), ("d", dist_start))
        )
        return structural_key(base, dist, [])

    assert key(1, 1) == key(2, 2)
    assert key(1, 2) != key(1, 1)
    assert key(1, 2) != key(2, 1)
