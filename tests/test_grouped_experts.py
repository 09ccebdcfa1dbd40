"""The FX frontend's reading of grouped experts: a grouped matmul computes what PyTorch
computes (the simulator against eager), and the sort undone by scattering into
`torch.empty` reads no uninitialised memory."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from scalify.canon.canonicalize import canonicalize
from scalify.capture.fx_trace import trace
from scalify.frontends.fx import graph_from_fx
from scalify.ir import feeding
from scalify.simulate.spmd import run_baseline


@pytest.mark.parametrize(
    "x_shape, w_shape",
    [((12, 8), (3, 8, 4)), ((8, 12), (12, 4))],
    ids=["rows_by_group_weights", "weight_gradient_per_group"],
)
def test_a_grouped_matmul_matches_eager(x_shape, w_shape):
    torch.manual_seed(0)
    x, w = torch.randn(*x_shape), torch.randn(*w_shape)
    offsets = torch.tensor([5, 5, 12], dtype=torch.int32)  # an empty group in the middle

    def grouped(x, offsets, w):
        return torch._grouped_mm(x, w, offs=offsets)

    graph = canonicalize(graph_from_fx(trace(grouped, (x, offsets, w)), "grouped"))
    assert not graph.opaque_nodes()
    inputs = (x.double().numpy(), offsets.numpy(), w.double().numpy())
    values = run_baseline(graph, dict(zip(graph.inputs, inputs, strict=True)))
    want = grouped(x, offsets, w).double().numpy()
    np.testing.assert_allclose(values[graph.outputs[0]], want, atol=1e-5)


def _restored(keys, values):
    """transformers' experts undo their sort so: `inverse[perm] = arange`."""
    _, perm = torch.sort(keys)
    inverse = torch.empty_like(perm)
    inverse[perm] = torch.arange(perm.size(0))
    return values[perm][inverse]


def test_the_inverse_of_a_sort_reads_no_uninitialised_memory():
    keys, values = torch.tensor([3, 1, 2, 0]), torch.randn(4, 8)
    graph = canonicalize(graph_from_fx(trace(_restored, (keys, values)), "restored"))
    opaque = {n.attrs.get("hlo_op") for n in graph.opaque_nodes()}
    assert opaque == {"aten.sort"}, opaque  # the sort itself has no semantics


def test_a_sort_s_permutation_overwrites_any_destination():
    """Whatever the destination held (here an input), every entry is written: the result
    does not read it."""

    def overwritten(keys, held, values):
        _, perm = torch.sort(keys)
        out = held.clone()
        out[perm] = values
        return out

    inputs = (torch.tensor([3, 1, 2, 0]), torch.randn(4), torch.randn(4))
    graph = canonicalize(graph_from_fx(trace(overwritten, inputs), "overwritten"))
    read = {graph.node(i).attrs.get("name") for i in feeding(graph, graph.outputs)}
    assert "held" not in read and "values" in read, read


def test_a_scatter_into_empty_by_other_indices_stays_opaque():
    """Indices that are no sort's permutation may leave entries unwritten."""

    def partial_write(index, values):
        out = torch.empty(4)
        out[index] = values
        return out

    graph = canonicalize(
        graph_from_fx(trace(partial_write, (torch.tensor([0, 2]), torch.randn(2))), "partial")
    )
    opaque = {n.attrs.get("hlo_op") for n in graph.opaque_nodes()}
    assert "aten.index_put_" in opaque or "aten.index_put" in opaque, opaque
