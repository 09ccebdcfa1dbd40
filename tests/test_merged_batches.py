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
