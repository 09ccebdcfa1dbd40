"""Flash decoding across devices: one decode step of attention with the KV cache split along
the sequence over the "tp" axis.

`attention` is the single-device reference. `flash_decode` is the per-device body: scores
against the local KV chunk, the global max by a max all-reduce, exp-weights and their sums
completed by sum all-reduces, then one division. Each bug is a single line, tagged with a BUG
comment naming it.
"""

from typing import Literal

import jax
import jax.numpy as jnp
from jax import Array, lax

Bug = Literal["local_max_only", "denominator_not_reduced"]
BUGS: tuple[Bug, ...] = ("local_max_only", "denominator_not_reduced")
SplitBug = Literal["base2_weights", "max_scaled_twice", "rescale_numerator_only"]
SPLIT_BUGS: tuple[SplitBug, ...] = ("base2_weights", "max_scaled_twice", "rescale_numerator_only")
ChunkBug = Literal["v_chunks_strided", "denominator_not_rescaled"]
CHUNK_BUGS: tuple[ChunkBug, ...] = ("v_chunks_strided", "denominator_not_rescaled")
LseBug = Literal["base2_lse", "lse_scaled_twice"]
LSE_BUGS: tuple[LseBug, ...] = ("base2_lse", "lse_scaled_twice")
LOG2_E = 1.4426950408889634
SCALE = 0.125  # the softmax scale, 1/sqrt(head_dim)
CHUNKS = 4  # KV chunks of the single-device split-KV kernel


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


def scaled_attention(q: Array, k: Array, v: Array) -> Array:
    """Baseline of the split form: softmax(SCALE * q.k) @ v."""
    return attention(q * SCALE, k, v)


def split_decode(q: Array, k: Array, v: Array, *, bug: SplitBug | None = None) -> Array:
    """The split-KV combine: each device runs attention on its chunk with its own max (the
    (m, l, o) a flash-decoding kernel returns), then the chunks are rescaled to the global
    max and summed."""
    s = jnp.einsum("bhd,bhsd->bhs", q * SCALE, k)
    m = jnp.max(s, axis=-1)  # this chunk's max
    p = jnp.exp(s - m[..., None])
    o = jnp.einsum("bhs,bhsd->bhd", p, v)  # unnormalised, relative to this chunk's max
    total = jnp.sum(p, axis=-1)
    g = lax.pmax(m, "tp")  # the global max
    if bug == "base2_weights":
        w = jnp.exp2(m - g)  # BUG: base2_weights
    elif bug == "max_scaled_twice":
        w = jnp.exp(m * SCALE - g)  # BUG: max_scaled_twice
    else:
        w = jnp.exp(m - g)  # rescale this chunk from its max to the global one
    numerator = lax.psum(o * w[..., None], "tp")
    if bug == "rescale_numerator_only":
        return numerator / lax.psum(total, "tp")[..., None]  # BUG: rescale_numerator_only
    return numerator / lax.psum(total * w, "tp")[..., None]


def split_decode_keepdims(q: Array, k: Array, v: Array, *, bug: None = None) -> Array:
    """The same combine written with `keepdims=True` and the rescale first (no bugs here)."""
    s = jnp.einsum("bhd,bhsd->bhs", q * SCALE, k)
    m = jnp.max(s, axis=-1, keepdims=True)
    p = jnp.exp(s - m)
    o = jnp.einsum("bhs,bhsd->bhd", p, v)
    total = jnp.sum(p, axis=-1, keepdims=True)
    w = jnp.exp(m - lax.pmax(m, "tp"))
    return lax.psum(w * o, "tp") / lax.psum(w * total, "tp")


def chunked_decode(
    q: Array, k: Array, v: Array, *, chunks: int = CHUNKS, bug: ChunkBug | None = None
) -> Array:
    """Split-KV on one device (the flash-decoding kernel's layout): the KV cache viewed as
    `chunks` chunks, each chunk's (m, l, o) computed at once, then combined across chunks."""
    b, h, n, d = k.shape
    kc = k.reshape(b, h, chunks, n // chunks, d)
    if bug == "v_chunks_strided":
        vc = v.reshape(b, h, n // chunks, chunks, d).swapaxes(2, 3)  # BUG: v_chunks_strided
    else:
        vc = v.reshape(b, h, chunks, n // chunks, d)  # the same chunks as k
    s = jnp.einsum("bhd,bhcsd->bhcs", q * SCALE, kc)
    m = jnp.max(s, axis=-1)  # each chunk's max
    p = jnp.exp(s - m[..., None])
    o = jnp.einsum("bhcs,bhcsd->bhcd", p, vc)
    total = jnp.sum(p, axis=-1)
    w = jnp.exp(m - jnp.max(m, axis=-1, keepdims=True))  # from each chunk's max to the global
    numerator = jnp.sum(o * w[..., None], axis=2)
    if bug == "denominator_not_rescaled":
        return numerator / jnp.sum(total, axis=-1)[..., None]  # BUG: denominator_not_rescaled
    return numerator / jnp.sum(total * w, axis=-1)[..., None]


def lse_partial(q: Array, k: Array, v: Array, bug: LseBug | None = None) -> tuple[Array, Array]:
    """What a flash-attention kernel returns for its part of the sequence: the output
    normalised by its own sum, and the log-sum-exp of its scores."""
    s = jnp.einsum("bhd,bhsd->bhs", q * SCALE, k)
    m = jnp.max(s, axis=-1)
    p = jnp.exp(s - m[..., None])
    total = jnp.sum(p, axis=-1)
    o = jnp.einsum("bhs,bhsd->bhd", p, v) / total[..., None]
    if bug == "base2_lse":
        return o, m * LOG2_E + jnp.log2(total)  # BUG: base2_lse
    if bug == "lse_scaled_twice":
        return o, (m + jnp.log(total)) * SCALE  # BUG: lse_scaled_twice
    return o, m + jnp.log(total)


def lse_decode(q: Array, k: Array, v: Array, *, bug: LseBug | None = None) -> Array:
    """The log-sum-exp merge across devices (vLLM's merge_attn_states): each device's
    normalised output weighted by exp(lse - max lse), over the sum of the weights."""
    o, lse = lse_partial(q, k, v, bug)
    w = jnp.exp(lse - lax.pmax(lse, "tp"))  # each part's share of the softmax mass
    return lax.psum(o * w[..., None], "tp") / lax.psum(w, "tp")[..., None]


def chunked_lse_decode(
    q: Array, k: Array, v: Array, *, chunks: int = CHUNKS, bug: None = None
) -> Array:
    """The same merge on one device, over KV chunks: the kernel runs on every chunk at once
    (vmapped over the chunk dim), and the merge reduces across it."""
    b, h, n, d = k.shape
    kc, vc = (t.reshape(b, h, chunks, n // chunks, d) for t in (k, v))
    o, lse = jax.vmap(lse_partial, in_axes=(None, 2, 2), out_axes=(2, 2))(q, kc, vc)
    w = jnp.exp(lse - jnp.max(lse, axis=-1, keepdims=True))
    return jnp.sum(o * w[..., None], axis=2) / jnp.sum(w, axis=-1)[..., None]
