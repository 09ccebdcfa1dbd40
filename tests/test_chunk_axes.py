"""A dim of independent chunks read as a mesh axis (scalify/forms/chunk_axes.py): the lifted graph
computes exactly what the original computes, graphs that mix chunks are left alone, and
single-device split-KV attention verifies against plain attention with each bug caught at
its line. Graphs are lowered by JAX in a subprocess."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
from conftest import REPO, assert_caught, assert_proved, export_example, verify_json

from scalify.forms.chunk_axes import CHUNK_AXIS, lift_chunk_axis
from scalify.frontends import load_graph
from scalify.mesh import Mesh
from scalify.simulate.spmd import random_input, run_baseline, run_spmd

pytest.importorskip("jax")

FD = REPO / "examples" / "flash_decoding"

PROGRAMS = textwrap.dedent(
    """
    import sys, jax, jax.numpy as jnp

    def chunked_sum(x):  # a sum over 4 chunks of 16
        return x.reshape(4, 16).sum(axis=1).sum(axis=0)

    def chunked_sum_via_max(x):  # the chunk sums combined with max: wrong
        return x.reshape(4, 16).sum(axis=1).max(axis=0)

    def whole_sum(x):
        return x.sum()

    def regrouped(x):  # a view that is merged back: no chunking
        return jnp.exp(x.reshape(4, 16) * 2.0).reshape(64).sum()

    def within_chunk_only(x):  # never reduced across the chunks: no chunking either
        return x.reshape(4, 16).sum(axis=1)

    def chunk_dot(x, w):  # chunks contracted by a dot: a sum across chunks
        return jnp.einsum("cs,cs->", x.reshape(4, 16), w.reshape(4, 16))

    def whole_dot(x, w):
        return jnp.dot(x, w)

    vec = jax.ShapeDtypeStruct((64,), jnp.float32)
    for name, fn, n in [
        ("chunked_sum", chunked_sum, 1), ("chunked_sum_via_max", chunked_sum_via_max, 1),
        ("whole_sum", whole_sum, 1), ("regrouped", regrouped, 1),
        ("within_chunk_only", within_chunk_only, 1), ("chunk_dot", chunk_dot, 2),
        ("whole_dot", whole_dot, 2),
    ]:
        text = jax.jit(fn).lower(*[vec] * n).as_text(dialect="hlo", debug_info=True)
        open(f"{sys.argv[1]}/{name}.hlo", "w").write(text)
    """
)


@pytest.fixture(scope="module")
def programs(tmp_path_factory):
    out = tmp_path_factory.mktemp("chunks")
    subprocess.run([sys.executable, "-c", PROGRAMS, str(out)], check=True, cwd=REPO)
    return out


@pytest.fixture(scope="module")
def flash(tmp_path_factory):
    return export_example(FD / "export.py", tmp_path_factory.mktemp("fd_chunks"), "--tp", "2")


def lifted_agrees(path) -> int:
    """Run the original graph on one device and the lifted one on every chunk's device:
    every device's outputs equal the original's. Returns the number of chunks."""
    graph = load_graph(str(path))
    lifted = lift_chunk_axis(graph, Mesh(()))
    assert lifted is not None and lifted.mesh.names == (CHUNK_AXIS,)
    rng = np.random.default_rng(0)
    inputs = {i: random_input(graph.node(i), rng) for i in graph.inputs}
    want = run_baseline(graph, inputs)
    got = run_spmd(
        lifted.graph, {i: [v] * lifted.mesh.size for i, v in inputs.items()}, lifted.mesh
    )
    for original, output in zip(graph.outputs, lifted.graph.outputs, strict=True):
        for device in range(lifted.mesh.size):
            np.testing.assert_allclose(got[output][device], want[original], rtol=1e-5)
    return lifted.chunks


@pytest.mark.parametrize("name", ["chunked_sum", "chunk_dot"])
def test_lifted_graph_computes_what_the_original_does(programs, name):
    assert lifted_agrees(programs / f"{name}.hlo") == 4


def test_lifted_split_kv_attention_computes_what_the_original_does(flash):
    assert lifted_agrees(flash / "chunked.hlo") == 4


@pytest.mark.parametrize("name", ["regrouped", "within_chunk_only", "whole_sum"])
def test_graphs_that_do_not_reduce_across_chunks_are_not_lifted(programs, name):
    assert lift_chunk_axis(load_graph(str(programs / f"{name}.hlo")), Mesh(())) is None


@pytest.mark.parametrize(
    ("base", "dist"), [("whole_sum", "chunked_sum"), ("whole_dot", "chunk_dot")]
)
def test_chunked_reduction_verifies(programs, base, dist):
    code, report = verify_json(programs / f"{base}.hlo", programs / f"{dist}.hlo")
    assert (code, report["verdict"]) == (0, "equivalent")
    assert any(f"axis '{CHUNK_AXIS}' of size 4" in note for note in report["notes"])


def test_a_graph_proved_as_written_is_not_lifted(programs):
    """The same chunking on both sides matches op for op: no chunk axis is needed."""
    code, report = verify_json(programs / "chunked_sum.hlo", programs / "chunked_sum.hlo")
    assert (code, report["verdict"]) == (0, "equivalent")
    assert not any(CHUNK_AXIS in note for note in report["notes"])


def test_chunks_combined_with_the_wrong_reduction_are_not_proved(programs):
    code, report = verify_json(programs / "whole_sum.hlo", programs / "chunked_sum_via_max.hlo")
    assert code == 1 and report["verdict"] == "not_equivalent"
    assert report["suspects"][0]["line"] > 0


def test_single_device_split_kv_attention_verifies(flash):
    fired = {"chunk_shift", "rescaled_dot", "rescale_to_global_max"}
    assert_proved(flash / "split_baseline.hlo", flash / "chunked.hlo", fired)


@pytest.mark.parametrize("bug", ["v_chunks_strided", "denominator_not_rescaled"])
def test_single_device_split_kv_bug_is_caught_at_its_line(flash, bug):
    assert_caught(flash / "split_baseline.hlo", flash / f"chunked_{bug}.hlo", FD / "model.py", bug)


def test_single_device_log_sum_exp_merge_over_chunks_verifies(flash):
    """The kernel vmapped over KV chunks, its (normalised output, lse) merged across them."""
    assert_proved(flash / "split_baseline.hlo", flash / "chunked_lse.hlo", {"reweight_part"})
