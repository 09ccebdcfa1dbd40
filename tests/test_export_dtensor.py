"""`scalify.capture.export` of a DTensor program: the per-device values it computed from the
rank (a vocab-parallel embedding's offset) and its DTensor output's placement travel in the
`.pt2`, and `scalify verify`, in another process, proves it."""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
from torch.distributed.tensor import Replicate  # noqa: E402
from torch.distributed.tensor.parallel import (  # noqa: E402
    ColwiseParallel,
    RowwiseParallel,
    parallelize_module,
)

from scalify.api import fake_mesh  # noqa: E402
from scalify.capture import export  # noqa: E402


class EmbedThenProject(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tok = nn.Embedding(64, 16)
        self.out = nn.Linear(16, 8, bias=False)

    def forward(self, ids):
        return self.out(self.tok(ids))


@pytest.fixture()
def mesh():
    """A fake 2-rank job, gone after the test (other tests start their own)."""
    import torch.distributed as dist

    yield fake_mesh("tp=2")
    if dist.is_initialized():
        dist.destroy_process_group()


def test_exported_dtensor_program_is_proved_from_its_files(tmp_path, mesh):
    model = EmbedThenProject()
    baseline = copy.deepcopy(model)
    plan = {
        "tok": RowwiseParallel(input_layouts=Replicate(), output_layouts=Replicate()),
        "out": ColwiseParallel(use_local_output=False),  # a DTensor Shard(-1) output
    }
    parallelize_module(model, mesh, plan)
    ids = torch.randint(0, 64, (2, 5))
    export(baseline, (ids,), tmp_path / "baseline.pt2")
    export(model, (ids,), tmp_path / "tp.pt2")
    result = subprocess.run(
        [sys.executable, "-m", "scalify.cli", "verify", "baseline.pt2", "tp.pt2"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "output 0: shard(2, tp) (DTensor placement)" in result.stdout
