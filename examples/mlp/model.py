"""Megatron-style MLP block: a single-device baseline and its tensor-parallel body.

`mlp` is the reference Scalify checks against. `tp_mlp` is the per-device body
run under `jax.shard_map` on a ("dp", "tp") mesh. Each `bug` variant changes
exactly one line, tagged with a trailing BUG comment naming it, so the verifier's
report can be checked against the line that computes the wrong operation.
"""

from typing import Literal

import jax
from jax import Array

Bug = Literal["bias_before_allreduce", "wrong_groups", "missing_allreduce", "double_allreduce"]
BUGS: tuple[Bug, ...] = (
    "bias_before_allreduce",
    "wrong_groups",
    "missing_allreduce",
    "double_allreduce",
)


def gelu(x: Array) -> Array:
    """Tanh GELU, shared by both paths so their elementwise ops are identical."""
    return jax.nn.gelu(x, approximate=True)


def mlp(x: Array, w1: Array, b1: Array, w2: Array, b2: Array) -> Array:
    """Single-device baseline: gelu(x @ w1 + b1) @ w2 + b2."""
    h = gelu(x @ w1 + b1)
    return h @ w2 + b2


def tp_mlp(
    x: Array, w1: Array, b1: Array, w2: Array, b2: Array, *, bug: Bug | None = None
) -> Array:
    """Per-device body: x split on "dp"; w1/b1 split by column and w2 by row on "tp"."""
    h = gelu(x @ w1 + b1)  # column-parallel: this device's ffn/tp slice, no communication
    partial_sum = h @ w2  # row-parallel: a partial sum over this device's ffn slice
    if bug == "bias_before_allreduce":
        return jax.lax.psum(partial_sum + b2, "tp")  # BUG: bias_before_allreduce
    if bug == "missing_allreduce":
        y = partial_sum  # BUG: missing_allreduce
    elif bug == "wrong_groups":
        y = jax.lax.psum(partial_sum, "dp")  # BUG: wrong_groups
    else:
        y = jax.lax.psum(partial_sum, "tp")  # sum the partials across the tp group
    if bug == "double_allreduce":
        y = jax.lax.psum(y, "tp")  # BUG: double_allreduce
    return y + b2  # b2 is replicated: add it once, after the reduction
