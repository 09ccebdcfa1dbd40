"""DTensor placements of a traced program's outputs, read as layouts: a strided shard (a
packed [gate | up] weight's gradient, FSDP2 over TP) is a shard with equal parts."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch.distributed.tensor import Partial, Replicate, Shard  # noqa: E402
from torch.distributed.tensor.placement_types import _StridedShard  # noqa: E402

from scalify.capture.placements import placement_layout  # noqa: E402
from scalify.mesh import parse_mesh  # noqa: E402

MESH = parse_mesh("tp=2")


@pytest.mark.parametrize(
    "placement, local_shape, layout",
    [
        (Shard(1), (4, 6), "shard(1, tp)"),
        (Replicate(), (4, 6), "replicate"),
        (Partial(), (4, 6), "partial(sum, tp)"),
        # two parts of 6 rows in the whole [12, ...]: each device holds 3 of each
        (_StridedShard(0, split_factor=2), (6, 5), "shard(0, tp, parts=[6, 6])"),
        (_StridedShard(-1, split_factor=3), (2, 6), "shard(1, tp, parts=[4, 4, 4])"),
    ],
)
def test_output_placements_read_as_layouts(placement, local_shape, layout):
    placed = ((placement,), ("tp",), (2,))
    assert placement_layout(placed, local_shape, MESH) == layout
