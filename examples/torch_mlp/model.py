"""Megatron-style MLP block in PyTorch: a single-device baseline and its tensor-parallel body.

`MLP` is the reference Scalify checks against: fc1, tanh GELU, fc2 (no bias), then `bias`.
`TPMLP` is one device's program on its local weight shards: fc1 split by output feature
(column-parallel), fc2 split by input feature (row-parallel), so each device holds a partial
sum of the output that one all-reduce completes. It calls PyTorch's functional collectives on
an explicit process group, so it traces with `torch.export` or `make_fx` in one process over
a fake process group. Each `bug` variant changes exactly one line, tagged with a trailing
BUG comment naming it, so the verifier's report can be checked against that line.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.distributed._functional_collectives import all_reduce

Bug = Literal["bias_before_allreduce", "missing_allreduce", "double_allreduce"]
BUGS: tuple[Bug, ...] = ("bias_before_allreduce", "missing_allreduce", "double_allreduce")


def gelu(x: Tensor) -> Tensor:
    """Tanh GELU, shared by both paths so their elementwise ops are identical."""
    return F.gelu(x, approximate="tanh")


class MLP(nn.Module):
    """Single-device baseline: fc2(gelu(fc1(x))) + bias."""

    def __init__(self, hidden: int, ffn: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(hidden, ffn)
        self.fc2 = nn.Linear(ffn, hidden, bias=False)
        self.bias = nn.Parameter(torch.zeros(hidden))

    def forward(self, x: Tensor) -> Tensor:
        h = gelu(self.fc1(x))
        return self.fc2(h) + self.bias


class BiasedMLP(nn.Module):
    """The plain nn.Linear form, fc2 with its own bias: what DTensor's RowwiseParallel shares
    out as bias / tp on each device before the all-reduce."""

    def __init__(self, hidden: int, ffn: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(hidden, ffn)
        self.fc2 = nn.Linear(ffn, hidden)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(gelu(self.fc1(x)))


class TPMLP(nn.Module):
    """One device's shard of `MLP`, with the same parameter names: fc1 holds this device's
    rows of fc1 (its ffn slice), fc2 its columns of fc2; x and bias are replicated.

    The body is written in `forward` itself: `torch.export` keeps only `forward` frames in
    its stack traces, so a bug in a helper function would be reported at the call site.
    """

    def __init__(
        self, full: MLP, rank: int, world: int, group: object, bug: Bug | None = None
    ) -> None:
        super().__init__()
        ffn = full.fc1.out_features
        if ffn % world:
            raise ValueError(f"ffn={ffn} must divide by the tensor-parallel degree {world}")
        rows = slice(rank * ffn // world, (rank + 1) * ffn // world)
        self.fc1 = nn.Linear(full.fc1.in_features, ffn // world)
        self.fc2 = nn.Linear(ffn // world, full.fc2.out_features, bias=False)
        with torch.no_grad():
            self.fc1.weight.copy_(full.fc1.weight[rows])
            self.fc1.bias.copy_(full.fc1.bias[rows])
            self.fc2.weight.copy_(full.fc2.weight[:, rows])
        self.bias = nn.Parameter(full.bias.detach().clone())
        self.group = group
        self.bug = bug

    def forward(self, x: Tensor) -> Tensor:
        group, bug, bias = self.group, self.bug, self.bias
        h = gelu(self.fc1(x))  # column-parallel: this device's ffn slice, no communication
        partial_sum = self.fc2(h)  # row-parallel: a partial sum over this device's ffn slice
        if bug == "bias_before_allreduce":
            return all_reduce(partial_sum + bias, "sum", group)  # BUG: bias_before_allreduce
        if bug == "missing_allreduce":
            y = partial_sum  # BUG: missing_allreduce
        else:
            y = all_reduce(partial_sum, "sum", group)  # sum the partials across the group
        if bug == "double_allreduce":
            y = all_reduce(y, "sum", group)  # BUG: double_allreduce
        return y + bias  # bias is replicated: add it once, after the reduction
