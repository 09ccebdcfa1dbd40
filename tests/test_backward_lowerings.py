"""Backward kernels as the FX frontend reads them compute what PyTorch computes: the
lowered graph run by the simulator against autograd (the CPU flash-attention kernel's
backward, complex RoPE's, an embedding's scatter-add, cross-entropy's one-hot scatter)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from scalify.canon.canonicalize import canonicalize
from scalify.capture.fx_trace import trace
from scalify.frontends.fx import graph_from_fx
from scalify.simulate.spmd import run_baseline


@pytest.mark.parametrize("kv_heads", [4, 2], ids=["mha", "gqa"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
def test_attention_gradients_match_the_kernel(kv_heads, causal):
    def gradients(q, k, v, grad_out):
        q, k, v = q * 1.0, k * 1.0, v * 1.0  # leaves autograd differentiates
        out = torch.nn.functional.scaled_dot_product_attention(
            q, k, v, is_causal=causal, enable_gqa=kv_heads != 4
        )
        return torch.autograd.grad((out * grad_out).sum(), [q, k, v])

    torch.manual_seed(0)
    q = torch.randn(2, 4, 8, 16, requires_grad=True)
    k, v = (torch.randn(2, kv_heads, 8, 16, requires_grad=True) for _ in range(2))
    grad_out = torch.randn(2, 4, 8, 16)
    expected = gradients(q, k, v, grad_out)
    gm = trace(gradients, (q, k, v, grad_out))
    kernels = [str(n.target) for n in gm.graph.nodes if "backward" in str(n.target)]
    assert kernels == ["aten._scaled_dot_product_flash_attention_for_cpu_backward.default"]
    graph = canonicalize(graph_from_fx(gm, "attention-backward"))
    assert not graph.opaque_nodes()
    inputs = {
        i: x.detach().double().numpy()
        for i, x in zip(graph.inputs, (q, k, v, grad_out), strict=True)
    }
    values = run_baseline(graph, inputs)
    for output, want in zip(graph.outputs, expected, strict=True):
        np.testing.assert_allclose(values[output], want.double().numpy(), atol=1e-5)


def test_the_gradient_through_complex_rope_matches_autograd():
    """torchtitan's and Llama's complex RoPE: its backward multiplies by the conjugate."""

    def gradient(x, freqs, grad_out):
        x = x * 1.0
        z = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2))
        out = torch.view_as_real(z * freqs).flatten(-2)
        (dx,) = torch.autograd.grad((out * grad_out).sum(), [x])
        return dx

    torch.manual_seed(0)
    x = torch.randn(2, 8, 4, 16, requires_grad=True)
    freqs = torch.polar(torch.ones(8, 1, 8), torch.randn(8, 1, 8))
    grad_out = torch.randn(2, 8, 4, 16)
    expected = gradient(x, freqs, grad_out)
    graph = canonicalize(graph_from_fx(trace(gradient, (x, freqs, grad_out)), "rope-backward"))
    assert not graph.opaque_nodes()
    given = {"x": x, "freqs": torch.view_as_real(freqs), "grad_out": grad_out}
    inputs = {i: given[graph.input_name(i)].detach().double().numpy() for i in graph.inputs}
    (output,) = graph.outputs
    got = run_baseline(graph, inputs)[output]
    np.testing.assert_allclose(got, expected.double().numpy(), atol=1e-5)


def test_the_gradients_of_an_embedding_and_a_cross_entropy_match_autograd():
    """`embedding_dense_backward` decomposes into an accumulating `index_put` (read as a
    one-hot product); `nll_loss_backward` into a `scatter` (read as a one-hot select)."""

    def gradients(table, ids, labels):
        table = table * 1.0
        logits = torch.nn.functional.embedding(ids, table).sum(-1, keepdim=True) * table[:, 0]
        loss = torch.nn.functional.cross_entropy(logits, labels, reduction="sum")
        return torch.autograd.grad(loss, [table])

    torch.manual_seed(0)
    table = torch.randn(16, 4, requires_grad=True)
    ids = torch.tensor([3, 3, 7, 0, 15, 3])
    labels = torch.tensor([1, 0, 15, 15, 2, 9])
    (expected,) = gradients(table, ids, labels)
    graph = canonicalize(graph_from_fx(trace(gradients, (table, ids, labels)), "lookups"))
    assert not graph.opaque_nodes()
    given = {"table": table, "ids": ids, "labels": labels}
    inputs = {i: given[graph.input_name(i)].detach().numpy() for i in graph.inputs}
    inputs = {i: v.astype(np.float64) if v.dtype.kind == "f" else v for i, v in inputs.items()}
    (output,) = graph.outputs
    got = run_baseline(graph, inputs)[output]
    np.testing.assert_allclose(got, expected.double().numpy(), atol=1e-5)
