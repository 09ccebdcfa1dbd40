"""A device's block of a weight re-laid out by views, written as its blocks of the weight's
parts (`scalify/canon/view_blocks.py`): found by running the view chain on the cut dim's
positions, exact on every device, and not found where the chain moves another dim or the
block is one run."""

from __future__ import annotations

import numpy as np

from scalify.canon.canonicalize import canonicalize
from scalify.frontends import parse_graph_text
from scalify.mesh import parse_mesh
from scalify.simulate.spmd import run_spmd


def _relaid(views: str) -> str:
    """w [4, 16] = [g|u] (8 columns each) on 2 devices, re-laid out by `views`, and the
    device's block of 8 columns of the result taken at 8 * partition id."""
    return f"""HloModule m, num_partitions=2
ENTRY main {{
  w = f32[4,16] parameter(0)
{views}
  pid = u32[] partition-id()
  r = s32[] convert(pid)
  eight = s32[] constant(8)
  off = s32[] multiply(r, eight)
  zero = s32[] constant(0)
  ROOT b = f32[4,8] dynamic-slice(relaid, zero, off), dynamic_slice_sizes={{4,8}}
}}
"""


INTERLEAVED = """  parts = f32[4,2,2,4] reshape(w)
  swapped = f32[4,2,2,4] transpose(parts), dimensions={0,2,1,3}
  relaid = f32[4,16] reshape(swapped)"""


def _blocks(text: str) -> tuple[object, list[np.ndarray]]:
    graph = canonicalize(parse_graph_text(text, "m.hlo"))
    w = np.arange(64, dtype=np.float32).reshape(4, 16)
    (param,) = graph.inputs
    values = run_spmd(graph, {param: [w, w]}, parse_mesh("tp=2"))
    return graph, values[graph.outputs[0]]


def test_a_block_of_an_interleaved_weight_is_its_blocks_of_the_parts():
    graph, blocks = _blocks(_relaid(INTERLEAVED))
    out = graph.node(graph.outputs[0])
    assert out.op == "concatenate"
    assert [graph.node(o).op for o in out.operands] == ["slice_at", "slice_at"]
    w = np.arange(64, dtype=np.float32).reshape(4, 16)
    for r in range(2):  # [g_r | u_r]
        parts = [w[:, 4 * r : 4 * r + 4], w[:, 8 + 4 * r : 12 + 4 * r]]
        np.testing.assert_array_equal(blocks[r], np.concatenate(parts, axis=1))


def test_a_chain_that_keeps_the_blocks_contiguous_is_left_as_it_is():
    """Without the transpose, the block is one run of the weight: a plain block."""
    plain = """  parts = f32[4,2,2,4] reshape(w)
  relaid = f32[4,16] reshape(parts)"""
    graph, _ = _blocks(_relaid(plain))
    assert graph.node(graph.outputs[0]).op == "slice_at"


def test_a_chain_that_moves_another_dim_is_not_read():
    """The rows are merged into the cut dim: no dim of the result is the columns alone."""
    moved = """  parts = f32[4,2,8] reshape(w)
  swapped = f32[2,4,8] transpose(parts), dimensions={1,0,2}
  relaid = f32[2,32] reshape(swapped)"""
    text = _relaid(moved).replace("f32[4,8] dynamic-slice", "f32[2,16] dynamic-slice")
    text = text.replace("dynamic_slice_sizes={4,8}", "dynamic_slice_sizes={2,16}")
    text = text.replace("constant(8)", "constant(16)").replace("f32[4,8]", "f32[2,16]")
    graph = canonicalize(parse_graph_text(text, "m.hlo"))
    assert graph.node(graph.outputs[0]).op == "slice_at"
