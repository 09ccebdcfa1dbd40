"""Megatron-style MLP block written with torch-xla collectives, for `scalify capture`.

`mlp` is the single-device baseline; `tp_mlp` is what every rank of a `tp` mesh runs: w1/b1
split by column, w2 by row (so each rank holds a partial sum of the output), then
`xm.all_reduce` over the tp group and the bias. Both receive Scalify's capture context
`ctx` and declare their inputs with `ctx.input(name, global_tensor, layout)`; on a rank that
returns the rank's block. Each bug variant changes exactly one line, tagged with a trailing
BUG comment naming it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import torch_xla.core.xla_model as xm

BATCH, HIDDEN, FFN = 8, 64, 256
SUM = xm.REDUCE_SUM


def inputs(ctx):
    """The same global tensors for both programs; the layouts say what each rank holds."""
    return (
        ctx.input("x", torch.randn(BATCH, HIDDEN)),
        ctx.input("w1", torch.randn(HIDDEN, FFN), "shard(1, tp)"),
        ctx.input("b1", torch.randn(FFN), "shard(0, tp)"),
        ctx.input("w2", torch.randn(FFN, HIDDEN), "shard(0, tp)"),
        ctx.input("b2", torch.randn(HIDDEN)),
    )


def mlp(ctx):
    """Single-device baseline: gelu(x @ w1 + b1) @ w2 + b2."""
    x, w1, b1, w2, b2 = inputs(ctx)
    h = F.gelu(x @ w1 + b1, approximate="tanh")
    return h @ w2 + b2


def tp_mlp(ctx, bug: str | None = None):
    """One rank: column-parallel w1, row-parallel w2, one all-reduce over tp."""
    x, w1, b1, w2, b2 = inputs(ctx)
    tp = ctx.groups("tp")  # the replica groups of the tp axis: [[0, 1, 2, 3]] on tp=4
    h = F.gelu(x @ w1 + b1, approximate="tanh")  # this rank's ffn slice, no communication
    partial_sum = h @ w2  # a partial sum over this rank's ffn slice
    if bug == "bias_before_allreduce":
        return xm.all_reduce(SUM, partial_sum + b2, groups=tp)  # BUG: bias_before_allreduce
    y = xm.all_reduce(SUM, partial_sum, groups=tp)  # sum the partials over tp
    if bug == "double_allreduce":
        y = xm.all_reduce(SUM, y, groups=tp)  # BUG: double_allreduce
    return y + b2  # b2 is replicated: add it once, after the reduction


def tp_mlp_bias_before_allreduce(ctx):
    """`tp_mlp` with its bias_before_allreduce line (a capture names a function, no args)."""
    return tp_mlp(ctx, "bias_before_allreduce")


def tp_mlp_double_allreduce(ctx):
    """`tp_mlp` with its double_allreduce line."""
    return tp_mlp(ctx, "double_allreduce")
