"""Flash decoding across devices: one decode step of attention with the KV cache split along
the sequence over the "tp" axis.

`attention` is the single-device reference. `flash_decode` is the per-device body: scores
against the local KV chunk, the global max by a max all-reduce, exp-weights and their sums
completed by sum all-reduces, then one division. Each bug is a single line, tagged with a BUG
comment naming it.
"""

from typing import Literal

import jax.numpy as jnp
from jax import Array, lax

Bug = Literal["local_max_only", "denominator_not_reduced"]
BUGS: tuple[Bug, ...] = ("local_max_only", "denominator_not_reduced")


def attention(q: Array, k: Array, v: Array) -> Array:
    """q: (batch, heads, head_dim); k, v: (batch, heads, seq, head_dim)."""
    s = jnp.einsum("bhd,bhsd->bhs", q, k)
    p = jnp.exp(s - jnp.max(s, axis=-1, keepdims=True))
    return jnp.einsum("bhs,bhsd->bhd", p, v) / jnp.sum(p, axis=-1)[..., None]


def flash_decode(q: Array, k: Array, v: Array, *, bug: Bug | None = None) -> Array:
    """k, v: this device's chunk of the sequence; q replicated."""
    s = jnp.einsum("bhd,bhsd->bhs", q, k)
    m = jnp.max(s, axis=-1, keepdims=True)
    if bug != "local_max_only":
        m = lax.pmax(m, "tp")  # the max over the whole sequence
    p = jnp.exp(s - m)  # BUG: local_max_only
    numerator = lax.psum(jnp.einsum("bhs,bhsd->bhd", p, v), "tp")
    if bug == "denominator_not_reduced":
        return numerator / jnp.sum(p, axis=-1)[..., None]  # BUG: denominator_not_reduced
    denominator = lax.psum(jnp.sum(p, axis=-1), "tp")  # the sum over the whole sequence
    return numerator / denominator[..., None]
