"""A DTensor program traced on several devices: numbers computed from the device become
expressions over its coordinate; a program that differs between devices in any other way is
an error naming the op, never read as device 0's program."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402

from scalify.api import check_equivalent, fake_mesh  # noqa: E402
from scalify.errors import ScalifyError  # noqa: E402


class FromRank(nn.Module):
    """Adds a number the host computes from the device's coordinate on the mesh."""

    def __init__(self, mesh, number) -> None:
        super().__init__()
        self.mesh, self.number = mesh, number

    def forward(self, x):
        return x + self.number(self.mesh.get_coordinate()[0])


class BranchOnRank(nn.Module):
    def __init__(self, mesh) -> None:
        super().__init__()
        self.mesh = mesh

    def forward(self, x):
        if self.mesh.get_coordinate()[0] == 1:  # BUG: only device 1 does something else
            return x * 2
        return x + 1


@pytest.fixture()
def mesh():
    yield fake_mesh("tp=4")
    if dist.is_initialized():
        dist.destroy_process_group()


def plus_one(x):
    return x + 1


def test_a_number_affine_in_the_coordinate_becomes_an_expression_over_it(mesh):
    """x + 3*r differs from x on every device but device 0: read as device 0's program
    (x + 0) the simulation would find every device right; read per device it finds one
    wrong, so the verdict is definite."""
    report = check_equivalent(
        plus_one, FromRank(mesh, lambda r: 3 * r + 1), mesh=mesh, example_inputs=(torch.ones(4),)
    )
    assert report.verdict == "not_equivalent"
    assert "on device " in report.counterexample


def test_a_number_not_affine_in_the_coordinate_is_an_error(mesh):
    with pytest.raises(ScalifyError, match="not affinely on its coordinates"):
        check_equivalent(
            lambda x: x, FromRank(mesh, lambda r: r * r), mesh=mesh, example_inputs=(torch.ones(4),)
        )


def test_a_program_whose_structure_depends_on_the_device_is_an_error(mesh):
    with pytest.raises(ScalifyError, match="differs between device 0 and the device"):
        check_equivalent(plus_one, BranchOnRank(mesh), mesh=mesh, example_inputs=(torch.ones(4),))


def test_trace_per_device_refuses_a_job_shape_its_process_group_does_not_have():
    """Probing devices the process group does not have would trace rank 0's program for
    them: a clear error instead."""
    from scalify.capture import trace_per_device

    fake_mesh("tp=2")
    try:
        with pytest.raises(ScalifyError, match=r"shape \[4\] \(4 devices\).*this one has 2"):
            trace_per_device(lambda: None, (4,))
    finally:
        dist.destroy_process_group()


class CountOfGroup(nn.Module):
    """Adds each device's block of the count 0..7, from its rank in its tensor-parallel
    process group (as torchtitan's vocab-parallel embedding reads its offset on a data x
    tensor mesh)."""

    def __init__(self, group) -> None:
        super().__init__()
        self.group = group

    def forward(self, x):
        return x + (torch.arange(4) + 4 * dist.get_rank(self.group))


def test_a_rank_in_a_sub_group_is_the_devices_coordinate_on_that_axis():
    """This process built device 0's tp group only ({0, 1}); traced as device 2 (dp 1, tp 0)
    the rank in its own tp group is 0, and as device 3 it is 1: the block is tp's."""
    mesh = fake_mesh("dp=2,tp=2")
    try:
        x = torch.ones(8, dtype=torch.int64)

        def check(axis: str):
            return check_equivalent(
                lambda x: x + torch.arange(8),
                CountOfGroup(mesh.get_group("tp")),
                mesh=mesh,
                example_inputs=(x,),
                parallel_inputs=(x[:4],),
                relations={"inputs": {"x": f"shard(0, {axis})"}, "outputs": [f"shard(0, {axis})"]},
            )

        report = check("tp")
        assert report.verdict == "equivalent", [s.reason for s in report.suspects[:1]]
        assert check("dp").verdict == "not_equivalent"
    finally:
        dist.destroy_process_group()


def test_a_mesh_of_an_earlier_process_group_is_not_read():
    """A mesh of the same size built under a process group since destroyed (an earlier job in
    the same process) is stale: the probe reads the live mesh's shape, not its."""
    from torch.distributed.device_mesh import init_device_mesh

    fake_mesh("tp=4")
    stale = init_device_mesh("cpu", (1, 1, 1, 4), mesh_dim_names=("a", "b", "c", "d"))
    dist.destroy_process_group()
    test_a_rank_in_a_sub_group_is_the_devices_coordinate_on_that_axis()
    assert stale.mesh.shape == (1, 1, 1, 4)  # still alive, and not read
