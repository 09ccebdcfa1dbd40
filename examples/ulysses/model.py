"""Ulysses (DeepSpeed) sequence parallelism for a self-attention block.

`attention_block` is the single-device baseline on a sequence-first layout
`(seq, batch, hidden)`. `ulysses_block` is the per-device body on a ("sp",) mesh: each device
holds a slice of the sequence; an all-to-all trades it for a slice of the heads (the whole
sequence), attention runs on the local heads, and a second all-to-all trades back. The
projection weights are replicated. Each bug is one line, tagged with a BUG comment naming it.
"""

from typing import Literal

import jax
import jax.numpy as jnp
from jax import Array, lax

Bug = Literal["wrong_reshape_after_all_to_all"]
BUGS: tuple[Bug, ...] = ("wrong_reshape_after_all_to_all",)
HEADS = 8


def attend(q: Array, k: Array, v: Array) -> Array:
    """Softmax attention per (batch, head) over the whole sequence; (s, b, n, d) layout."""
    scores = jnp.einsum("sbnd,tbnd->bnst", q, k) / jnp.sqrt(q.shape[-1]).astype(q.dtype)
    return jnp.einsum("bnst,tbnd->sbnd", jax.nn.softmax(scores, axis=-1), v)


def heads(x: Array, w: Array) -> Array:
    """Project and split the hidden dim into (heads, head_dim)."""
    y = x @ w
    return y.reshape(*y.shape[:-1], HEADS, y.shape[-1] // HEADS)


def attention_block(x: Array, wq: Array, wk: Array, wv: Array, wo: Array) -> Array:
    o = attend(heads(x, wq), heads(x, wk), heads(x, wv))
    return o.reshape(*o.shape[:2], -1) @ wo


def seq_to_heads(t: Array) -> Array:
    """(s/P, b, n, d) -> (s, b, n/P, d): scatter the heads, gather the sequence."""
    return lax.all_to_all(t, "sp", split_axis=2, concat_axis=0, tiled=True)


def ulysses_block(
    x: Array, wq: Array, wk: Array, wv: Array, wo: Array, *, bug: Bug | None = None
) -> Array:
    """x: (seq/P, batch, hidden) on each device; weights replicated."""
    q, k, v = (seq_to_heads(heads(x, w)) for w in (wq, wk, wv))
    o = attend(q, k, v)  # (s, b, n/P, d): the local heads over the whole sequence
    o = lax.all_to_all(o, "sp", split_axis=0, concat_axis=2, tiled=True)  # back to (s/P, b, n, d)
    s, b = x.shape[:2]
    if bug == "wrong_reshape_after_all_to_all":
        # batch-first shape from a sibling branch: same element count, wrong order
        o = o.reshape(b, s, -1).transpose(1, 0, 2)  # BUG: wrong_reshape_after_all_to_all
    else:
        o = o.reshape(s, b, -1)
    return o @ wo
