"""An entry read, changed and written back (`grad[rows, target] -= update`, as Megatron's
vocab-parallel cross-entropy writes its backward) is read as the change added at a one-hot:
each device's block of `softmax - one_hot(target)` is proved against the whole, and near
misses (the entry read from another column, the update not masked outside the block) are
not."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402

from scalify.api import check_equivalent, fake_mesh  # noqa: E402

ROWS, VOCAB = 6, 16


def whole_gradient(probs, target):
    grad = probs.clone()
    grad[torch.arange(ROWS), target] -= 1.0
    return grad


class BlockGradient(nn.Module):
    """The device's block of the vocabulary: the target masked to it and made local, the
    update 1 where the target is in the block and 0 elsewhere."""

    def __init__(self, group, bug: str = "") -> None:
        super().__init__()
        self.group, self.bug = group, bug

    def forward(self, probs, target):
        block = probs.shape[-1]
        start = dist.get_rank(self.group) * block
        outside = (target < start) | (target >= start + block)
        local = target - start
        local[outside] = 0
        grad = probs.clone()
        rows = torch.arange(ROWS)
        update = 1.0 if self.bug == "unmasked_update" else 1.0 - outside.float()
        if self.bug == "other_column":
            grad[rows, local] = grad[rows, (local + 1) % block] - update
        else:
            grad[rows, local] -= update
        return grad


def _check(bug: str = ""):
    mesh = fake_mesh("tp=2")
    try:
        probs = torch.rand(ROWS, VOCAB)
        target = torch.randint(0, VOCAB, (ROWS,))
        return check_equivalent(
            whole_gradient,
            BlockGradient(mesh.get_group("tp"), bug),
            mesh=mesh,
            example_inputs=(probs, target),
            parallel_inputs=(probs[:, : VOCAB // 2], target),
            relations={
                "inputs": {"probs": "shard(1, tp)", "target": "replicate"},
                "outputs": ["shard(1, tp)"],
            },
        )
    finally:
        dist.destroy_process_group()


def test_the_block_of_the_gradient_is_proved():
    report = _check()
    assert report.verdict == "equivalent", [s.reason for s in report.suspects[:2]]


@pytest.mark.parametrize("bug", ["other_column", "unmasked_update"])
def test_near_misses_are_not_proved(bug):
    assert _check(bug).verdict == "not_equivalent"
