"""Tensor-parallel attention whose heads are reached through other view chains.

`attention` is the single-device baseline, written the usual way: project, reshape
`[b, s, h*d] -> [b, s, h, d]`, swap to `[b, h, s, d]`, attend, swap back and merge. The
per-device body `tp_attention` (on a ("tp",) mesh: q/k/v column-parallel, the output
projection row-parallel) computes the same values by other routes, as code from another
framework would: q transposes first, splits, and swaps back; k is an einsum over the weight
viewed as `[m, h, d]` (the weight first, so the dot's output is permuted); the output merges
its heads from a sequence-first layout. Each bug changes one line (a split on the wrong
factor, a weight viewed with its factors swapped, heads merged in the wrong order), tagged
with a BUG comment naming it.
"""

from typing import Literal, get_args

import jax
import jax.numpy as jnp
from jax import Array, lax

Bug = Literal["split_wrong_factor", "weight_view_swapped", "merge_wrong_order"]
BUGS: tuple[Bug, ...] = get_args(Bug)
HEAD_DIM = 8


def attend(q: Array, k: Array, v: Array) -> Array:
    """Softmax attention over (b, h, s, d)."""
    scores = jnp.einsum("bhsd,bhtd->bhst", q, k) / jnp.sqrt(q.shape[-1])
    return jnp.einsum("bhst,bhtd->bhsd", jax.nn.softmax(scores, axis=-1), v)


def attention(x: Array, wq: Array, wk: Array, wv: Array, wo: Array) -> Array:
    b, s, _ = x.shape

    def heads(t: Array) -> Array:
        return t.reshape(b, s, -1, HEAD_DIM).transpose(0, 2, 1, 3)

    o = attend(heads(x @ wq), heads(x @ wk), heads(x @ wv))
    return o.transpose(0, 2, 1, 3).reshape(b, s, -1) @ wo


def tp_attention(
    x: Array, wq: Array, wk: Array, wv: Array, wo: Array, *, bug: Bug | None = None
) -> Array:
    """x replicated; wq/wk/wv split by column, wo by row: this device's heads."""
    b, s, m = x.shape
    h = wq.shape[1] // HEAD_DIM
    t = (x @ wq).transpose(0, 2, 1)  # [b, h*d, s]
    if bug == "split_wrong_factor":
        q = t.reshape(b, HEAD_DIM, h, s).transpose(0, 2, 3, 1)  # BUG: split_wrong_factor
    else:
        q = t.reshape(b, h, HEAD_DIM, s).transpose(0, 1, 3, 2)
    if bug == "weight_view_swapped":
        k = jnp.einsum("bsm,mdh->bhsd", x, wk.reshape(m, HEAD_DIM, h))  # BUG: weight_view_swapped
    else:
        k = jnp.einsum("bsm,mhd->bhsd", x, wk.reshape(m, h, HEAD_DIM))
    v = (x @ wv).reshape(b, s, h, HEAD_DIM).transpose(0, 2, 1, 3)
    o = attend(q, k, v).transpose(2, 0, 1, 3)  # [s, b, h, d]
    if bug == "merge_wrong_order":
        o = o.transpose(0, 1, 3, 2).reshape(s, b, -1)  # BUG: merge_wrong_order
    else:
        o = o.reshape(s, b, -1)
    return lax.psum(o.transpose(1, 0, 2) @ wo, "tp")
