"""A collective a traced program runs over one axis of a 2-D mesh is read over that axis:
the FX frontend records the device's own group (its global ranks: {0, 2} for dp on a
dp x tp mesh), and the mesh finds the axis whose groups include it. Reducing over the other
axis is caught."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import torch.distributed as dist  # noqa: E402
import torch.distributed._functional_collectives as funcol  # noqa: E402
from torch import nn  # noqa: E402

from scalify.api import check_equivalent, fake_mesh  # noqa: E402


class RowSum(nn.Module):
    """Each device's rows summed, then the sums added over `axis`'s group."""

    def __init__(self, group) -> None:
        super().__init__()
        self.group = group

    def forward(self, x):
        return funcol.all_reduce(x.sum(0), "sum", self.group)


@pytest.mark.parametrize("axis, verdict", [("dp", "equivalent"), ("tp", "not_equivalent")])
def test_a_reduction_over_one_axis_of_two_is_read_over_it(axis, verdict):
    mesh = fake_mesh("dp=2,tp=2")
    try:
        x = torch.randn(4, 8)
        report = check_equivalent(
            lambda x: x.sum(0),
            RowSum(mesh.get_group(axis)),
            mesh=mesh,
            example_inputs=(x,),
            parallel_inputs=(x[:2],),
            relations={"inputs": {"x": "shard(0, dp)"}, "outputs": ["replicate"]},
        )
        assert report.verdict == verdict, [s.reason for s in report.suspects[:2]]
    finally:
        dist.destroy_process_group()
