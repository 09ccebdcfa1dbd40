"""Megatron-style sequence parallelism for a transformer MLP block.

`block` is the single-device baseline. `sp_block` is the per-device body on a ("tp",) mesh:
activations are split along the sequence between blocks; the norm runs on the local
sequence slice, an all-gather along the sequence feeds the column-parallel matmul, and a
reduce-scatter along the sequence completes the row-parallel matmul. Each bug is one line,
tagged with a BUG comment naming it.
"""

from functools import partial
from typing import Literal

import jax
import jax.numpy as jnp
from jax import Array, lax

Bug = Literal["slice_instead_of_reduce_scatter", "all_reduce_before_reduce_scatter"]
BUGS: tuple[Bug, ...] = ("slice_instead_of_reduce_scatter", "all_reduce_before_reduce_scatter")


def rms_norm(x: Array, w: Array) -> Array:
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-5) * w


def block(x: Array, wn: Array, w1: Array, w2: Array) -> Array:
    """Baseline: x + gelu(rms_norm(x) @ w1) @ w2 on the whole sequence."""
    return x + jax.nn.gelu(rms_norm(x, wn) @ w1, approximate=True) @ w2


def sp_block(x: Array, wn: Array, w1: Array, w2: Array, *, bug: Bug | None = None) -> Array:
    """x: (batch, seq/tp, hidden) on each device; w1 split by column, w2 by row."""
    h = rms_norm(x, wn)  # the norm needs only the local sequence slice
    h = jax.lax.all_gather(h, "tp", axis=1, tiled=True)  # whole sequence for the matmul
    p = jax.nn.gelu(h @ w1, approximate=True) @ w2  # partial sums over the ffn slices
    n, rank = x.shape[1], lax.axis_index("tp")
    scatter = partial(lax.psum_scatter, axis_name="tp", scatter_dimension=1, tiled=True)
    if bug == "slice_instead_of_reduce_scatter":
        y = lax.dynamic_slice_in_dim(p, rank * n, n, 1)  # BUG: slice_instead_of_reduce_scatter
    elif bug == "all_reduce_before_reduce_scatter":
        y = scatter(lax.psum(p, "tp"))  # BUG: all_reduce_before_reduce_scatter
    else:
        y = scatter(p)  # sum the partials and keep this device's sequence slice
    return x + y
