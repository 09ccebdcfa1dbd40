"""What the numbers say at a refuted proof's suspects: a value that equals a baseline value
(only a rule is missing there, the programs part later) or one that equals none."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from scalify.api import check_equivalent, fake_mesh  # noqa: E402


def doubled(x, w):
    return x * 2 + w


def doubled_by_a_sum_then_one_too_many(x, w):
    """x + x is x * 2 (no rule says so), then a stray + 1: the programs part at the + 1."""
    return (x + x) + w + 1


def _check(parallel):
    x, w = torch.randn(8, 4), torch.randn(8, 4)
    return check_equivalent(doubled, parallel, mesh=fake_mesh("tp=2"), example_inputs=(x, w))


def test_a_suspect_whose_values_match_is_where_only_a_rule_is_missing():
    report = _check(doubled_by_a_sum_then_one_too_many)
    assert report.verdict == "not_equivalent"
    first = report.suspects[0]
    assert first.reason.startswith("no rule relates add"), first.reason
    assert "only a rule relating them is missing here" in first.numerically, first.numerically
    assert "of baseline `mul`" in first.numerically, first.numerically


class _RowParallelWithoutReduce(torch.nn.Module):
    """Each device's rows of w times its columns of x, the partial sums never all-reduced."""

    def __init__(self, w):
        super().__init__()
        self.w = torch.nn.Parameter(w)

    def forward(self, x):
        return torch.relu(x @ self.w)


def test_a_suspect_whose_values_match_nothing_says_so():
    """A partial sum put through relu: relu of a part is no layout of the baseline's relu."""
    torch.manual_seed(0)
    w = torch.randn(8, 4)
    x = torch.randn(2, 8)
    report = check_equivalent(
        _RowParallelWithoutReduce(w),
        _RowParallelWithoutReduce(w[:4]),
        mesh=fake_mesh("tp=2"),
        example_inputs=(x,),
        parallel_inputs=(x[:, :4],),
        relations={"inputs": {"x": "shard(1, tp)", "w": "shard(0, tp)"}},
    )
    assert report.verdict == "not_equivalent"
    first = report.suspects[0]
    assert first.numerically.endswith("under a one-axis layout"), first.numerically
