"""A layer stack written as a loop: `lax.scan` over stacked weights, as JAX code writes deep
models. Each layer is a pre-norm residual MLP block, tensor parallel in the body (column then
row parallel, one all-reduce). XLA lowers the scan to an HLO `while`; Scalify unrolls loops
with a static trip count, and layer memoisation proves the repeated body once.
Each bug changes one line of the body, tagged with a BUG comment.
"""

from typing import Literal

import jax
import jax.numpy as jnp
from jax import Array, lax

Bug = Literal["missing_allreduce", "residual_inside_allreduce"]
BUGS: tuple[Bug, ...] = ("missing_allreduce", "residual_inside_allreduce")


def norm(x: Array) -> Array:
    return x * lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-5)


def stack(x: Array, w1: Array, w2: Array) -> Array:
    """Baseline: x (batch, hidden); w1 (layers, hidden, ffn); w2 (layers, ffn, hidden)."""

    def layer(h: Array, w: tuple[Array, Array]) -> tuple[Array, None]:
        return h + jax.nn.gelu(norm(h) @ w[0]) @ w[1], None

    return lax.scan(layer, x, (w1, w2))[0]


def tp_stack(x: Array, w1: Array, w2: Array, *, bug: Bug | None = None) -> Array:
    """Per device: w1 split by ffn columns, w2 by ffn rows, in every layer."""

    def layer(h: Array, w: tuple[Array, Array]) -> tuple[Array, None]:
        partial_sum = jax.nn.gelu(norm(h) @ w[0]) @ w[1]
        if bug == "missing_allreduce":
            return h + partial_sum, None  # BUG: missing_allreduce
        if bug == "residual_inside_allreduce":
            return lax.psum(h + partial_sum, "tp"), None  # BUG: residual_inside_allreduce
        return h + lax.psum(partial_sum, "tp"), None

    return lax.scan(layer, x, (w1, w2))[0]
