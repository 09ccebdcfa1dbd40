"""A batched product over batch and heads merged into one dim (Megatron's attention scores):
with the heads split over devices it is proved through its per-head form; a program that
merges one operand's dims in the other order, or splits the result the other way, is not."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from scalify.api import check_equivalent, fake_mesh  # noqa: E402


def scores(q, k):
    """[s, b, n, h] -> [b, n, s, s], as Megatron's DotProductAttention computes them."""
    s, b, n, h = q.shape
    merged_q = q.reshape(s, b * n, h).transpose(0, 1)
    merged_k = k.reshape(s, b * n, h).transpose(0, 1).transpose(1, 2)
    return torch.bmm(merged_q, merged_k).view(b, n, s, s)


def heads_major_q(q, k):
    """BUG: the queries merged heads-major, the keys batch-major: heads meet other rows."""
    s, b, n, h = q.shape
    merged_q = q.transpose(1, 2).reshape(s, n * b, h).transpose(0, 1)
    merged_k = k.reshape(s, b * n, h).transpose(0, 1).transpose(1, 2)
    return torch.bmm(merged_q, merged_k).view(b, n, s, s)


def split_the_other_way(q, k):
    """BUG: the product split back as [n, b] and returned as if it were [b, n]."""
    s, b, n, h = q.shape
    merged_q = q.reshape(s, b * n, h).transpose(0, 1)
    merged_k = k.reshape(s, b * n, h).transpose(0, 1).transpose(1, 2)
    return torch.bmm(merged_q, merged_k).view(n, b, s, s).transpose(0, 1)


def _check(parallel, tp: int = 2):
    mesh = fake_mesh(f"tp={tp}")
    q, k = torch.randn(8, 2, 4, 4), torch.randn(8, 2, 4, 4)
    heads = 4 // tp
    return check_equivalent(
        scores,
        parallel,
        mesh=mesh,
        example_inputs=(q, k),
        parallel_inputs=(q[:, :, :heads], k[:, :, :heads]),
        relations={
            "inputs": {"q": "shard(2, tp)", "k": "shard(2, tp)"},
            "outputs": ["shard(1, tp)"],
        },
    )


@pytest.mark.parametrize("tp", [2, 4], ids=["two_heads_per_device", "one_head_per_device"])
def test_the_product_over_merged_batch_and_heads_is_proved(tp):
    report = _check(scores, tp)
    assert report.verdict == "equivalent", [s.reason for s in report.suspects[:2]]


@pytest.mark.parametrize("parallel", [heads_major_q, split_the_other_way])
def test_merges_that_pair_other_rows_are_not_proved(parallel):
    assert _check(parallel).verdict == "not_equivalent"


def attention(q, k, v, split=lambda x, b, n: x.view(b, n, *x.shape[1:])):
    """Megatron's core attention on [s, b, n, h]: scores and context over batch and heads
    merged, softmax on the split scores; the context back to [s, b, n, h]."""
    s, b, n, h = q.shape
    probs = torch.softmax(split(scores(q, k).flatten(0, 1), b, n), dim=-1).flatten(0, 1)
    merged_v = v.reshape(s, b * n, h).transpose(0, 1)
    return torch.bmm(probs, merged_v).view(b, n, s, h).permute(2, 0, 1, 3)


def gradients(q, k, v, grad_out):
    """Autograd's backward of `attention`: scaled, transposed and reduced on the merged dim
    before it is split again."""
    q, k, v = (x * 1.0 for x in (q, k, v))  # leaves autograd differentiates
    return torch.autograd.grad((attention(q, k, v) * grad_out).sum(), [q, k, v])


def gradients_split_the_other_way(q, k, v, grad_out):
    """BUG: the scores split back as [n, b] before the softmax (which does not care), and
    the rows paired wrongly from there on, in the forward and so in the backward."""
    q, k, v = (x * 1.0 for x in (q, k, v))

    def other_way(x, b, n):
        return x.view(n, b, *x.shape[1:]).transpose(0, 1)

    out = attention(q, k, v, split=other_way)
    return torch.autograd.grad((out * grad_out).sum(), [q, k, v])


def _check_gradients(parallel, tp: int):
    mesh = fake_mesh(f"tp={tp}")
    torch.manual_seed(0)
    q, k, v = (torch.randn(8, 2, 4, 4, requires_grad=True) for _ in range(3))
    g = torch.randn(8, 2, 4, 4)
    heads = 4 // tp
    names = ("q", "k", "v", "grad_out")
    return check_equivalent(
        gradients,
        parallel,
        mesh=mesh,
        example_inputs=(q, k, v, g),
        parallel_inputs=tuple(x[:, :, :heads].detach().requires_grad_() for x in (q, k, v, g)),
        relations={
            "inputs": {name: "shard(2, tp)" for name in names},
            "outputs": ["shard(2, tp)"] * 3,
        },
    )


@pytest.mark.parametrize("tp", [2, 4], ids=["two_heads_per_device", "one_head_per_device"])
def test_the_backward_over_merged_batch_and_heads_is_proved(tp):
    report = _check_gradients(gradients, tp)
    assert report.verdict == "equivalent", [s.reason for s in report.suspects[:2]]


def test_a_backward_whose_rows_are_paired_wrongly_is_not_proved():
    assert _check_gradients(gradients_split_the_other_way, 2).verdict == "not_equivalent"
