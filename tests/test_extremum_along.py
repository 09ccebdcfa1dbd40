"""`x.max(dim)` and `x.min(dim)` (attention with sinks subtracts the row maximum): the values
read as a reduce and compute what PyTorch computes."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from scalify.canon.canonicalize import canonicalize  # noqa: E402
from scalify.capture.fx_trace import trace  # noqa: E402
from scalify.frontends.fx import graph_from_fx  # noqa: E402
from scalify.simulate.spmd import run_baseline  # noqa: E402


def _extrema(x):
    return x.max(dim=-1, keepdim=True).values * 2, x.min(1).values


def test_the_values_of_max_and_min_along_a_dim_match_eager():
    x = torch.randn(3, 5)
    graph = canonicalize(graph_from_fx(trace(_extrema, (x,)), "extrema"))
    assert not graph.opaque_nodes()  # the unused indices are pruned
    values = run_baseline(graph, {graph.inputs[0]: x.double().numpy()})
    for output, want in zip(graph.outputs, _extrema(x), strict=True):
        np.testing.assert_allclose(values[output], want.double().numpy())
