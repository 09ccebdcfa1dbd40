"""Silent-bug corpus: published distributed-LLM bugs (ids from silent-bugs.md) as JAX models.

Each entry is a single-device baseline and a per-device `jax.shard_map` body. The body takes
`bug: bool`; the buggy version differs from the fixed one in exactly one line, tagged with a
trailing `# BUG: <id>` comment, so the verifier's first suspect can be checked against it.
Shapes are small; the mesh is ("tp",) = (4,) or ("dp", "tp") = (2, 4).

`ENTRIES` lists the metadata; `args` maps each argument to (shape, partition spec, dtype)
where the spec is a tuple of mesh axis names (or None) for `PartitionSpec`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import Array, lax

TP = 4
EPS = 1e-5
SOFTMAX_SCALE = 0.125


def gelu(x: Array) -> Array:
    return jax.nn.gelu(x, approximate=True)


def rank() -> Array:
    return lax.axis_index("tp")


# B01: vocab-parallel cross-entropy run on logits that were already gathered. The fixed body
# keeps the logits vocab-parallel: max and exp-sum all-reduced, the target logit looked up
# in the device's block of the vocab and all-reduced (token ids assumed in range).
def b01_base(h: Array, w: Array, t: Array) -> Array:
    z = h @ w  # (tokens, vocab)
    m = jnp.max(z, axis=-1)
    lse = m + jnp.log(jnp.sum(jnp.exp(z - m[:, None]), axis=-1))
    return lse - jnp.take_along_axis(z, t[:, None], axis=-1)[:, 0]


def b01_body(h: Array, w: Array, t: Array, *, bug: bool = False) -> Array:
    z = h @ w  # this device's vocab slice of the logits
    if bug:  # parallel_output=False: the output layer all-gathers the logits
        z = lax.all_gather(z, "tp", axis=1, tiled=True)  # BUG: B01
    cols = z.shape[1]
    m = lax.pmax(jnp.max(z, axis=-1), "tp")
    lse = m + jnp.log(lax.psum(jnp.sum(jnp.exp(z - m[:, None]), axis=-1), "tp"))
    local = t - rank() * cols
    mine = (local >= 0) & (local < cols)
    picked = jnp.take_along_axis(z, jnp.clip(local, 0, cols - 1)[:, None], axis=-1)[:, 0]
    return lse - lax.psum(jnp.where(mine, picked, 0.0), "tp")


# B02: an already all-reduced activation is treated as a partial sum and reduced again.
def b02_base(x: Array, wo: Array, w1: Array) -> Array:
    return gelu((x @ wo) @ w1)


def b02_body(x: Array, wo: Array, w1: Array, *, bug: bool = False) -> Array:
    h = lax.psum(x @ wo, "tp")  # attention output: row-parallel, reduced over tp
    if bug:
        h = lax.psum(h, "tp")  # BUG: B02
    return gelu(h @ w1)


# B03: a tp-partial MLP output is sliced by rows instead of reduce-scattered.
def b03_base(x: Array, w1: Array, w2: Array) -> Array:
    return gelu(x @ w1) @ w2


def b03_body(x: Array, w1: Array, w2: Array, *, bug: bool = False) -> Array:
    p = gelu(x @ w1) @ w2  # partial sum over this device's ffn slice
    n = x.shape[0] // TP
    if bug:
        y = lax.dynamic_slice_in_dim(p, rank() * n, n, 0)  # BUG: B03
    else:
        y = lax.psum_scatter(p, "tp", scatter_dimension=0, tiled=True)
    return y


# B09: the replicated bias of a row-parallel matmul is added before the all-reduce.
def b09_base(x: Array, w: Array, b: Array) -> Array:
    return x @ w + b


def b09_body(x: Array, w: Array, b: Array, *, bug: bool = False) -> Array:
    p = x @ w  # partial sum over this device's contraction slice
    if bug:
        return lax.psum(p + b, "tp")  # BUG: B09
    return lax.psum(p, "tp") + b


# B14: a Python scalar added to a partial sum on every rank.
def b14_base(x: Array) -> Array:
    return jnp.sum(x, axis=1) + 10.0


def b14_body(x: Array, *, bug: bool = False) -> Array:
    s = jnp.sum(x, axis=1)  # partial: this device's columns only
    if bug:
        return lax.psum(s + 10.0, "tp")  # BUG: B14
    return lax.psum(s, "tp") + 10.0


# B15: the norm of a partial tensor taken before the reduction (sum of norms).
def norm(y: Array) -> Array:
    return jnp.sqrt(jnp.sum(y * y, axis=-1))


def b15_base(x: Array, w: Array) -> Array:
    return norm(x @ w)


def b15_body(x: Array, w: Array, *, bug: bool = False) -> Array:
    p = x @ w  # partial sum over the contraction slice
    if bug:
        return lax.psum(jnp.sqrt(jnp.sum(p * p, axis=-1)), "tp")  # BUG: B15
    return norm(lax.psum(p, "tp"))


# B16: contraction-dim shards paired in mismatched order (lhs blocks in reversed device order).
def b16_base(x: Array, w: Array) -> Array:
    return x @ w


def b16_body(x: Array, w: Array, *, bug: bool = False) -> Array:
    k = w.shape[0]  # w: this device's row block of the contraction dim
    if bug:
        xs = lax.dynamic_slice_in_dim(x, (TP - 1 - rank()) * k, k, 1)  # BUG: B16
    else:
        xs = lax.dynamic_slice_in_dim(x, rank() * k, k, 1)
    return lax.psum(xs @ w, "tp")


# B17: the loss all-reduce runs over the whole world instead of the dp group.
def b17_base(x: Array) -> Array:
    return jnp.sum(x * x)


def b17_body(x: Array, *, bug: bool = False) -> Array:
    loss = jnp.sum(x * x)  # this dp replica's batch slice; identical across tp
    if bug:
        return lax.psum(loss, ("dp", "tp"))  # BUG: B17
    return lax.psum(loss, "dp")


# B18: a gather over the full (dp, tp) group where the tp sub-group was meant.
def b18_base(x: Array) -> Array:
    return jnp.sum(x, axis=1)


def b18_body(x: Array, *, bug: bool = False) -> Array:
    if bug:
        h = lax.all_gather(x, ("dp", "tp"), axis=1, tiled=True)  # BUG: B18
    else:
        h = lax.all_gather(x, "tp", axis=1, tiled=True)
    return jnp.sum(h, axis=1)


# B21: bf16 partial sums all-reduced in bf16; the baseline accumulates in f32, rounds once.
def b21_base(x: Array, w: Array) -> Array:
    return jnp.dot(x, w, preferred_element_type=jnp.float32).astype(jnp.bfloat16)


def b21_body(x: Array, w: Array, *, bug: bool = False) -> Array:
    p = jnp.dot(x, w, preferred_element_type=jnp.float32)  # f32 partial sum
    if bug:
        return lax.psum(p.astype(jnp.bfloat16), "tp")  # BUG: B21
    return lax.psum(p, "tp").astype(jnp.bfloat16)


# B26: a fused [gate|up] projection column-sharded as one block, then split locally.
def swiglu(x: Array, w: Array) -> Array:
    g, u = jnp.split(x @ w, 2, axis=-1)
    return jax.nn.silu(g) * u


def b26_base(x: Array, wgu: Array, w2: Array) -> Array:
    return swiglu(x, wgu) @ w2


def b26_body(x: Array, wgu: Array, w2: Array, *, bug: bool = False) -> Array:
    f = w2.shape[0]  # this device's ffn slice; wgu is replicated, [gate | up]
    gu = wgu.reshape(wgu.shape[0], 2, wgu.shape[1] // 2)  # [hidden, gate/up, ffn]
    if bug:
        w = lax.dynamic_slice_in_dim(wgu, rank() * 2 * f, 2 * f, 1)  # BUG: B26
    else:
        w = lax.dynamic_slice_in_dim(gu, rank() * f, f, 2).reshape(wgu.shape[0], 2 * f)
    return lax.psum(swiglu(x, w) @ w2, "tp")


# B27: a fused [Q|K|V] weight cut evenly into one block per rank, whatever its layout; the
# local product is then chunked into q, k, v. `attend` stands for the attention: it
# contracts q with k per feature and sums v, which is all the layout bug needs.
def attend(q: Array, k: Array, v: Array) -> Array:
    return jnp.sum(q * k, axis=-1) + jnp.sum(v, axis=-1)


def b27_base(x: Array, wqkv: Array) -> Array:
    return attend(*jnp.split(x @ wqkv, 3, axis=-1))


def qkv_blocks(wqkv: Array, sizes: tuple[int, ...]) -> Array:
    """This rank's block of each part of a replicated [Q|K|V] weight, side by side."""
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    return jnp.concatenate(
        [
            lax.dynamic_slice_in_dim(wqkv[:, s : s + n], rank() * (n // TP), n // TP, 1)
            for s, n in zip(starts, sizes, strict=True)
        ],
        axis=1,
    )


def b27_body(x: Array, wqkv: Array, *, bug: bool = False) -> Array:
    d = wqkv.shape[1] // 3
    if bug:
        w = lax.dynamic_slice_in_dim(wqkv, rank() * (3 * d // TP), 3 * d // TP, 1)  # BUG: B27
    else:
        w = qkv_blocks(wqkv, (d, d, d))
    return lax.psum(attend(*jnp.split(x @ w, 3, axis=-1)), "tp")


# B28: each rank splits its [q|k|v] block with sizes computed from the hidden size instead of
# the projection size (a ViT whose projection is wider than its hidden states).
B28_HIDDEN, B28_PROJ = 16, 24


def b28_base(x: Array, wqkv: Array) -> Array:
    p = wqkv.shape[1] // 3
    return attend(*jnp.split(x @ wqkv, [p, 2 * p], axis=-1))


def b28_body(x: Array, wqkv: Array, *, bug: bool = False) -> Array:
    p = wqkv.shape[1] // 3
    qkv = x @ qkv_blocks(wqkv, (p, p, p))
    if bug:
        q, k, v = jnp.split(qkv, [x.shape[1] // TP, 2 * x.shape[1] // TP], -1)  # BUG: B28
    else:
        q, k, v = jnp.split(qkv, [p // TP, 2 * p // TP], axis=-1)
    return lax.psum(attend(q, k, v), "tp")


# B29: a norm over all heads (the whole q projection) computed over the local heads only.
def b29_base(x: Array, wq: Array, wo: Array) -> Array:
    q = x @ wq
    ss = jnp.sum(q * q, axis=-1, keepdims=True)
    return (q * lax.rsqrt(ss / wq.shape[1] + EPS)) @ wo


def b29_body(x: Array, wq: Array, wo: Array, *, bug: bool = False) -> Array:
    q = x @ wq  # this device's heads
    d = wq.shape[1] * TP
    ss = jnp.sum(q * q, axis=-1, keepdims=True)  # partial: local heads only
    if bug:
        inv = lax.rsqrt(ss / d + EPS)  # BUG: B29
    else:
        inv = lax.rsqrt(lax.psum(ss, "tp") / d + EPS)
    return lax.psum((q * inv) @ wo, "tp")


# B30: distributed RMSNorm: the all-reduced sum of squares divided by the LOCAL count.
def b30_base(x: Array, g: Array) -> Array:
    ss = jnp.sum(x * x, axis=-1, keepdims=True)
    return x * lax.rsqrt(ss / x.shape[-1] + EPS) * g


def b30_body(x: Array, g: Array, *, bug: bool = False) -> Array:
    ss = lax.psum(jnp.sum(x * x, axis=-1, keepdims=True), "tp")  # x: hidden slice
    if bug:
        return x * lax.rsqrt(ss / x.shape[-1] + EPS) * g  # BUG: B30
    return x * lax.rsqrt(ss / (x.shape[-1] * TP) + EPS) * g


# B04: a shared expert's partial sum never reduced, added to the reduced routed experts.
def moe_routed(x: Array, wr: Array, w1: Array, w2: Array) -> Array:
    """Dense (one-hot/einsum) MoE: every expert on every token, weighted by its gate."""
    gates = jax.nn.softmax(x @ wr, axis=-1)  # [tokens, experts]
    h = gelu(jnp.einsum("th,ehf->etf", x, w1))
    return jnp.einsum("te,etf,efh->th", gates, h, w2)


def b04_base(x: Array, wr: Array, w1: Array, w2: Array, ws1: Array, ws2: Array) -> Array:
    return moe_routed(x, wr, w1, w2) + gelu(x @ ws1) @ ws2


def b04_body(
    x: Array, wr: Array, w1: Array, w2: Array, ws1: Array, ws2: Array, *, bug: bool = False
) -> Array:
    routed = lax.psum(moe_routed(x, wr, w1, w2), "tp")  # TP inside every expert
    shared = gelu(x @ ws1) @ ws2  # partial: this device's ffn slice of the shared expert
    if bug:
        return routed + shared  # BUG: B04
    return routed + lax.psum(shared, "tp")


# B08: the row-parallel bias shared out as b/tp; its gradient must stay the full sum of g.
def b08_base(x: Array, w: Array, b: Array, g: Array) -> tuple[Array, Array]:
    return x @ w + b, jnp.sum(g, axis=0)


def b08_body(x: Array, w: Array, b: Array, g: Array, *, bug: bool = False) -> tuple[Array, Array]:
    y = lax.psum(x @ w + b / TP, "tp")  # forward fix: each rank adds its share of b
    if bug:
        return y, jnp.sum(g, axis=0) / TP  # BUG: B08
    return y, jnp.sum(g, axis=0)  # the bias gradient is not divided: b is replicated


# B10-B13 take their gradients from `jax.grad`/`jax.vjp` of the forward they belong to, as
# a training step does; inside `shard_map` (replication check off, as Megatron's autograd
# functions run) the gradient of a replicated weight over this rank's tokens is a partial
# sum, and the one line that differs is the collective it gets.


# B10: dgamma of a norm over sequence-sharded tokens is never all-reduced.
def rms_hat(x: Array) -> Array:
    return x * lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + EPS)


def norm_weight_grad(x: Array, g: Array) -> Array:
    """The gradient of a norm's weight (ones) given the output's gradient g, from autograd."""
    gamma = jnp.ones(x.shape[-1], x.dtype)
    _, pullback = jax.vjp(lambda w: rms_hat(x) * w, gamma)  # GRADIENT: B10
    (dgamma,) = pullback(g)
    return dgamma


def b10_base(x: Array, g: Array) -> Array:
    return norm_weight_grad(x, g)


def b10_body(x: Array, g: Array, *, bug: bool = False) -> Array:
    # x, g: this device's tokens (sequence-sharded over the tp x sp axis)
    dgamma = norm_weight_grad(x, g)  # this rank's tokens only: a partial sum
    if bug:
        return dgamma  # BUG: B10
    return lax.psum(dgamma, "tp")


# B11: an SP-replicated RMSNorm weight: output sequence-sharded, weight gradient partial.
def b11_base(x: Array, gamma: Array, g: Array) -> tuple[Array, Array]:
    y, pullback = jax.vjp(lambda w: rms_hat(x) * w, gamma)
    return y, pullback(g)[0]


def b11_body(x: Array, gamma: Array, g: Array, *, bug: bool = False) -> tuple[Array, Array]:
    # x: [seq/tp, batch, hidden], gamma replicated over tp
    y, pullback = jax.vjp(lambda w: rms_hat(x) * w, gamma)  # GRADIENT: B11
    (dgamma,) = pullback(g)  # the weight gradient over this rank's tokens: partial over tp
    if bug:
        return y, dgamma  # BUG: B11
    return y, lax.psum(dgamma, "tp")


# B12: the hidden-state gradient of a vocab-parallel LM head is a partial sum, used unreduced.
def lm_head_input_grad(dlogits: Array, w: Array) -> Array:
    """The gradient of the LM head's input h (logits = h @ w.T) from the logits' gradient."""
    h = jnp.zeros((dlogits.shape[0], w.shape[1]), dlogits.dtype)
    _, pullback = jax.vjp(lambda h: h @ w.T, h)  # GRADIENT: B12
    return pullback(dlogits)[0]


def b12_base(dlogits: Array, w: Array) -> Array:
    return lm_head_input_grad(dlogits, w)


def b12_body(dlogits: Array, w: Array, *, bug: bool = False) -> Array:
    # dlogits: this rank's vocab columns; w: its vocab rows. The gradient is a partial sum
    # (placement P) that must be all-reduced, not labelled replicated (R).
    dh = lm_head_input_grad(dlogits, w)
    if bug:
        return dh  # BUG: B12
    return lax.psum(dh, "tp")


# B13: backward of an all-gather of tokens across expert ranks: a slice instead of a
# reduce-scatter (each rank's gradient holds only its own experts' contributions).
def expert_input_grad(dy: Array, w: Array) -> Array:
    """The gradient of the tokens x every expert reads (y = einsum(x, w) per expert)."""
    x = jnp.zeros((dy.shape[1], w.shape[1]), dy.dtype)
    _, pullback = jax.vjp(lambda x: jnp.einsum("tg,egh->eth", x, w), x)
    return pullback(dy)[0]


def b13_base(dy: Array, w: Array) -> Array:
    return expert_input_grad(dy, w)


def b13_body(dy: Array, w: Array, *, bug: bool = False) -> Array:
    dx = expert_input_grad(dy, w)  # partial: this rank's experts
    n = dx.shape[0] // TP
    if bug:
        return lax.dynamic_slice_in_dim(dx, rank() * n, n, 0)  # BUG: B13
    return lax.psum_scatter(dx, "tp", scatter_dimension=0, tiled=True)


# B19: a gradient norm where TP-sharded gradients are counted on rank 0 only.
def b19_base(g: Array, r: Array) -> Array:
    return jnp.sum(g * g) + jnp.sum(r * r)


def b19_body(g: Array, r: Array, *, bug: bool = False) -> Array:
    tp_part = jnp.sum(g * g)  # g: this rank's shard of a TP-sharded gradient
    rest = jnp.sum(r * r)  # r: a replicated (non-TP) gradient, counted once: on rank 0
    if bug:
        local = jnp.where(rank() == 0, tp_part + rest, 0.0)  # BUG: B19
    else:
        local = tp_part + jnp.where(rank() == 0, rest, 0.0)
    return lax.psum(local, "tp")


# B20: data-parallel gradients averaged by the size of the wrong group.
def b20_base(x: Array, dy: Array) -> Array:
    return (x.T @ dy) / 2


def b20_body(x: Array, dy: Array, *, bug: bool = False) -> Array:
    g = lax.psum(x.T @ dy, "dp")  # x, dy: this dp replica's tokens
    if bug:
        return g / TP  # BUG: B20
    return g / 2  # the dp group has 2 replicas


# B33: a vocab-parallel embedding's gradient, from autograd, reduced over the tensor-parallel
# group where the data-parallel one was meant (embedding gradients combined across the wrong
# ranks: the class of Megatron-LM #844).
def embedding_loss(table: Array, ids: Array) -> Array:
    return jnp.sum(jnp.square(table[ids]))


def b33_base(table: Array, ids: Array) -> Array:
    return jax.grad(embedding_loss)(table, ids)


def b33_body(table: Array, ids: Array, *, bug: bool = False) -> Array:
    # table: this device's block of rows (tp); ids: this data-parallel replica's tokens
    rows = table.shape[0]
    local = ids - lax.axis_index("tp") * rows
    mine = (local >= 0) & (local < rows)

    def lookup(t: Array) -> Array:
        return jnp.where(mine[:, None], t[jnp.clip(local, 0, rows - 1)], 0.0)

    partial_h, pullback = jax.vjp(lookup, table)  # autograd: a scatter-add of rows
    h = lax.psum(partial_h, "tp")  # the embedding of this replica's tokens
    (g,) = pullback(2 * h)  # this replica's tokens' gradient of this device's rows
    if bug:
        return lax.psum(g, "tp")  # BUG: B33
    return lax.psum(g, "dp")


# B32: Ulysses all-to-all output reshaped with the batch-first shape of a sibling branch.
def self_attend(t: Array) -> Array:
    """Per-head softmax self-attention over the whole sequence; t: (seq, batch, heads, dim)."""
    scores = jnp.einsum("sbnd,tbnd->bnst", t, t)
    return jnp.einsum("bnst,tbnd->sbnd", jax.nn.softmax(scores, axis=-1), t)


def b32_base(x: Array) -> Array:
    return self_attend(x)


def b32_body(x: Array, *, bug: bool = False) -> Array:
    # x: this device's sequence slice, all heads; attention needs all of the sequence
    t = lax.all_to_all(x, "tp", split_axis=2, concat_axis=0, tiled=True)  # (s, b, n/P, d)
    if bug:
        t = t.reshape(t.shape[1], t.shape[0], *t.shape[2:]).swapaxes(0, 1)  # BUG: B32
    o = self_attend(t)  # the local heads over the whole sequence
    return lax.all_to_all(o, "tp", split_axis=0, concat_axis=2, tiled=True)


# B22-B24: split-KV decoding. Each device attends over its chunk of the KV cache with its own
# max m and returns (m, o, l): o = exp(s - m) @ v and l = sum(exp(s - m)); the combine
# rescales both to the global max g by exp(m - g) and sums.
def decode_scores(q: Array, k: Array) -> Array:
    return jnp.einsum("bhd,bhsd->bhs", q, k)


def chunk_state(q: Array, k: Array, v: Array) -> tuple[Array, Array, Array]:
    s = decode_scores(q, k)
    m = jnp.max(s, axis=-1)
    p = jnp.exp(s - m[..., None])
    return m, jnp.einsum("bhs,bhsd->bhd", p, v), jnp.sum(p, axis=-1)


def decode_base(q: Array, k: Array, v: Array) -> Array:
    s = decode_scores(q, k)
    p = jnp.exp(s - jnp.max(s, axis=-1, keepdims=True))
    return jnp.einsum("bhs,bhsd->bhd", p, v) / jnp.sum(p, axis=-1)[..., None]


def b22_body(q: Array, k: Array, v: Array, *, bug: bool = False) -> Array:
    m, o, total = chunk_state(q, k, v)
    g = lax.pmax(m, "tp")
    if bug:
        w = jnp.exp2(m - g)  # BUG: B22
    else:
        w = jnp.exp(m - g)  # the states are natural-log: weights are natural exps
    return lax.psum(o * w[..., None], "tp") / lax.psum(total * w, "tp")[..., None]


def b23_base(q: Array, k: Array, v: Array) -> Array:
    return decode_base(q * SOFTMAX_SCALE, k, v)


def b23_body(q: Array, k: Array, v: Array, *, bug: bool = False) -> Array:
    m, o, total = chunk_state(q * SOFTMAX_SCALE, k, v)  # m is the max of scaled scores
    g = lax.pmax(m, "tp")
    if bug:
        w = jnp.exp(m * SOFTMAX_SCALE - g)  # BUG: B23
    else:
        w = jnp.exp(m - g)
    return lax.psum(o * w[..., None], "tp") / lax.psum(total * w, "tp")[..., None]


def b24_base(q: Array, k: Array, v: Array, sink: Array) -> Array:
    s = decode_scores(q, k)
    m = jnp.max(s, axis=-1)
    p = jnp.exp(s - m[..., None])
    den = jnp.sum(p, axis=-1) + jnp.exp(sink - m)  # the sink logit enters the sum once
    return jnp.einsum("bhs,bhsd->bhd", p, v) / den[..., None]


def b24_body(q: Array, k: Array, v: Array, sink: Array, *, bug: bool = False) -> Array:
    m, o, total = chunk_state(q, k, v)
    g = lax.pmax(m, "tp")
    w = jnp.exp(m - g)
    if bug:
        den = lax.psum((total + jnp.exp(sink - m)) * w, "tp")  # BUG: B24
    else:
        den = lax.psum(total * w, "tp") + jnp.exp(sink - g)
    return lax.psum(o * w[..., None], "tp") / den[..., None]


TP_MESH = {"tp": TP}
DP_TP_MESH = {"dp": 2, "tp": TP}
F32, BF16 = "float32", "bfloat16"
SPLIT_KV = {
    "q": ((2, 4, 8), (), F32),
    "k": ((2, 4, 32, 8), (None, None, "tp", None), F32),
    "v": ((2, 4, 32, 8), (None, None, "tp", None), F32),
}
ROW_PARALLEL = {"x": ((8, 32), (None, "tp"), F32), "w": ((32, 16), ("tp", None), F32)}

ENTRIES: list[dict] = [
    {
        "id": "B01",
        "title": "Vocab-parallel CE applied to already-gathered logits",
        "link": "https://github.com/NVIDIA/Megatron-LM/issues/7452",
        "bug_class": "wrong collective",
        "mesh": TP_MESH,
        "args": {
            "h": ((8, 16), (), F32),
            "w": ((16, 64), (None, "tp"), F32),
            "t": ((8,), (), "int32"),
        },
        "out_spec": (),
        "baseline": b01_base,
        "body": b01_body,
        "bug": "the vocab-parallel loss run on gathered logits: its exp-sum all-reduce counts "
        "the whole vocab tp times",
    },
    {
        "id": "B02",
        "title": "DP gather sums replicas that were already reduced",
        "link": "https://github.com/sgl-project/sglang/issues/31699",
        "bug_class": "wrong collective",
        "mesh": TP_MESH,
        "args": {
            "x": ((8, 32), (None, "tp"), F32),
            "wo": ((32, 16), ("tp", None), F32),
            "w1": ((16, 16), (), F32),
        },
        "out_spec": (),
        "baseline": b02_base,
        "body": b02_body,
        "bug": "the reduced attention output is all-reduced again",
    },
    {
        "id": "B03",
        "title": "TP-partial MoE output scattered without being reduced",
        "link": "https://github.com/sgl-project/sglang/pull/27189",
        "bug_class": "wrong collective",
        "mesh": TP_MESH,
        "args": {
            "x": ((8, 16), (), F32),
            "w1": ((16, 32), (None, "tp"), F32),
            "w2": ((32, 16), ("tp", None), F32),
        },
        "out_spec": ("tp", None),
        "baseline": b03_base,
        "body": b03_body,
        "bug": "row slice of the partial sum instead of a reduce-scatter",
    },
    {
        "id": "B09",
        "title": "Row-parallel bias added before the all-reduce",
        "link": "https://github.com/EleutherAI/gpt-neox/issues/962",
        "bug_class": "wrong collective",
        "mesh": TP_MESH,
        "args": {**ROW_PARALLEL, "b": ((16,), (), F32)},
        "out_spec": (),
        "baseline": b09_base,
        "body": b09_body,
        "bug": "`psum(x@w + b)`: the bias is added on every rank, tp times in all",
    },
    {
        "id": "B14",
        "title": "DTensor: Python scalar added to a Partial(sum) tensor on every rank",
        "link": "https://github.com/pytorch/pytorch/issues/163193",
        "bug_class": "wrong collective",
        "mesh": TP_MESH,
        "args": {"x": ((8, 32), (None, "tp"), F32)},
        "out_spec": (),
        "baseline": b14_base,
        "body": b14_body,
        "bug": "`psum(sum(x) + 10)`: the scalar is added to each partial",
    },
    {
        "id": "B15",
        "title": "DTensor: norm computed on a Partial tensor before reducing",
        "link": "https://github.com/pytorch/pytorch/pull/159856",
        "bug_class": "wrong collective",
        "mesh": TP_MESH,
        "args": dict(ROW_PARALLEL),
        "out_spec": (),
        "baseline": b15_base,
        "body": b15_body,
        "bug": "`psum(norm(p))`: the sum of per-rank norms, not the norm of the sum",
    },
    {
        "id": "B16",
        "title": "Matmul accepts mismatched shard order on the contraction dim",
        "link": "https://github.com/pytorch/pytorch/issues/166598",
        "bug_class": "axis split",
        "mesh": TP_MESH,
        "args": {"x": ((8, 32), (), F32), "w": ((32, 16), ("tp", None), F32)},
        "out_spec": (),
        "baseline": b16_base,
        "body": b16_body,
        "bug": "the lhs K-block is taken in reversed device order against w's K-block",
    },
    {
        "id": "B17",
        "title": "All-reduce groups ignored: loss reduced over the world instead of DP",
        "link": "https://github.com/aws-neuron/aws-neuron-sdk/issues/1107",
        "bug_class": "wrong configuration",
        "mesh": DP_TP_MESH,
        "args": {"x": ((8, 16), ("dp", None), F32)},
        "out_spec": (),
        "baseline": b17_base,
        "body": b17_body,
        "bug": "`psum(loss, ('dp', 'tp'))` where `psum(loss, 'dp')` was meant (tp x too big)",
    },
    {
        "id": "B18",
        "title": "Gather over the full TP group instead of the attention-TP group",
        "link": "https://github.com/sgl-project/sglang/pull/20492",
        "bug_class": "wrong configuration",
        "mesh": DP_TP_MESH,
        "args": {"x": ((8, 16), ("dp", "tp"), F32)},
        "out_spec": ("dp",),
        "baseline": b18_base,
        "body": b18_body,
        "bug": "all-gather over ('dp', 'tp') mixes in the other dp replica's rows",
    },
    {
        "id": "B21",
        "title": "BF16 partials summed in a BF16 TP all-reduce",
        "link": "https://github.com/NVIDIA/TransformerEngine/issues/1761",
        "bug_class": "precision",
        "mesh": TP_MESH,
        "args": {"x": ((8, 32), (None, "tp"), BF16), "w": ((32, 16), ("tp", None), BF16)},
        "out_spec": (),
        "baseline": b21_base,
        "body": b21_body,
        "bug": "f32 partials rounded to bf16 before the all-reduce",
    },
    {
        "id": "B26",
        "title": "Packed [gate|up] projection column-sharded as one block",
        "link": "https://github.com/NVIDIA-NeMo/Automodel/pull/1324",
        "bug_class": "layout",
        "mesh": TP_MESH,
        "args": {
            "x": ((8, 16), (), F32),
            "wgu": ((16, 64), (), F32),
            "w2": ((32, 16), ("tp", None), F32),
        },
        "out_spec": (),
        "baseline": b26_base,
        "body": b26_body,
        "bug": "one contiguous column block of [gate|up] per rank, split locally",
    },
    {
        "id": "B27",
        "title": "AutoTP cuts a fused [Q|K|V] weight evenly, whatever its layout",
        "link": "https://github.com/deepspeedai/DeepSpeed/pull/3844",
        "bug_class": "layout",
        "mesh": TP_MESH,
        "args": {"x": ((8, 16), (), F32), "wqkv": ((16, 96), (), F32)},
        "out_spec": (),
        "baseline": b27_base,
        "body": b27_body,
        "bug": "one contiguous column block of [Q|K|V] per rank, chunked locally into q, k, v",
    },
    {
        "id": "B28",
        "title": "Fused QKV split with sizes computed from the wrong dimension",
        "link": "https://github.com/vllm-project/vllm/issues/27570",
        "bug_class": "layout",
        "mesh": TP_MESH,
        "args": {
            "x": ((8, B28_HIDDEN), (), F32),
            "wqkv": ((B28_HIDDEN, 3 * B28_PROJ), (), F32),
        },
        "out_spec": (),
        "baseline": b28_base,
        "body": b28_body,
        "bug": "local q/k/v split at hidden/tp instead of projection/tp",
    },
    {
        "id": "B29",
        "title": "QK-norm over all heads computed rank-locally",
        "link": "https://github.com/EleutherAI/gpt-neox/pull/1424",
        "bug_class": "wrong collective",
        "mesh": TP_MESH,
        "args": {
            "x": ((8, 16), (), F32),
            "wq": ((16, 32), (None, "tp"), F32),
            "wo": ((32, 16), ("tp", None), F32),
        },
        "out_spec": (),
        "baseline": b29_base,
        "body": b29_body,
        "bug": "the sum of squares over the local heads is not all-reduced",
    },
    {
        "id": "B30",
        "title": "Distributed RMSNorm stats: sum mistaken for mean",
        "link": "https://github.com/tenstorrent/tt-mlir/pull/8798",
        "bug_class": "wrong configuration",
        "mesh": TP_MESH,
        "args": {"x": ((8, 32), (None, "tp"), F32), "g": ((32,), ("tp",), F32)},
        "out_spec": (None, "tp"),
        "baseline": b30_base,
        "body": b30_body,
        "bug": "the all-reduced sum of squares divided by the local hidden size",
    },
    {
        "id": "B04",
        "title": "Shared expert left as a partial sum under attention DP",
        "link": "https://github.com/vllm-project/tpu-inference/pull/3435",
        "bug_class": "wrong collective",
        "mesh": TP_MESH,
        "args": {
            "x": ((8, 16), (), F32),
            "wr": ((16, 4), (), F32),
            "w1": ((4, 16, 32), (None, None, "tp"), F32),
            "w2": ((4, 32, 16), (None, "tp", None), F32),
            "ws1": ((16, 32), (None, "tp"), F32),
            "ws2": ((32, 16), ("tp", None), F32),
        },
        "out_spec": (),
        "baseline": b04_base,
        "body": b04_body,
        "bug": "the shared expert's tp-partial output is added without an all-reduce",
    },
    {
        "id": "B08",
        "title": "Row-parallel bias: forward scaling and backward gradient both wrong",
        "link": "https://github.com/pytorch/torchtitan/pull/4332",
        "bug_class": "wrong configuration",
        "mesh": TP_MESH,
        "args": {**ROW_PARALLEL, "b": ((16,), (), F32), "g": ((8, 16), (), F32)},
        "out_specs": [(), ()],
        "baseline": b08_base,
        "body": b08_body,
        "bug": "the replicated bias's gradient divided by tp like its forward share",
    },
    {
        "id": "B10",
        "title": "Missing dgamma all-reduce along the sequence-parallel axis",
        "link": "https://github.com/NVIDIA/TransformerEngine/pull/2230",
        "bug_class": "wrong collective",
        "mesh": TP_MESH,
        "args": {"x": ((16, 32), ("tp", None), F32), "g": ((16, 32), ("tp", None), F32)},
        "out_spec": (),
        "baseline": b10_base,
        "body": b10_body,
        "bug": "dgamma summed over this rank's tokens only, never all-reduced",
    },
    {
        "id": "B11",
        "title": "SP-replicated norm weights: gradient never all-reduced over TP",
        "link": "https://github.com/NVIDIA/Megatron-LM/issues/1446",
        "bug_class": "wrong collective",
        "mesh": TP_MESH,
        "args": {
            "x": ((16, 2, 32), ("tp", None, None), F32),
            "gamma": ((32,), (), F32),
            "g": ((16, 2, 32), ("tp", None, None), F32),
        },
        "out_specs": [("tp", None, None), ()],
        "baseline": b11_base,
        "body": b11_body,
        "bug": "the norm weight's gradient is this rank's partial sum, not all-reduced",
    },
    {
        "id": "B12",
        "title": "TP gradient with P placement labelled R (chunked CE loss)",
        "link": "https://github.com/pytorch/torchtitan/pull/3412",
        "bug_class": "wrong collective",
        "mesh": TP_MESH,
        "args": {"dlogits": ((8, 64), (None, "tp"), F32), "w": ((64, 16), ("tp", None), F32)},
        "out_spec": (),
        "baseline": b12_base,
        "body": b12_body,
        "bug": "the vocab-parallel hidden-state gradient is used without its all-reduce",
    },
    {
        "id": "B13",
        "title": "Backward of an EP all-gather: slice instead of reduce-scatter",
        "link": "https://github.com/NVIDIA-NeMo/Automodel/pull/1260",
        "bug_class": "wrong collective",
        "mesh": TP_MESH,
        "args": {
            "dy": ((8, 16, 32), ("tp", None, None), F32),
            "w": ((8, 16, 32), ("tp", None, None), F32),
        },
        "out_spec": ("tp", None),
        "baseline": b13_base,
        "body": b13_body,
        "bug": "the token gradient is sliced per rank instead of reduce-scattered",
    },
    {
        "id": "B19",
        "title": "Grad norm counts only TP rank 0's gradients",
        "link": "https://github.com/deepspeedai/DeepSpeed/pull/5411",
        "bug_class": "wrong configuration",
        "mesh": TP_MESH,
        "args": {"g": ((16, 32), (None, "tp"), F32), "r": ((32,), (), F32)},
        "out_spec": (),
        "baseline": b19_base,
        "body": b19_body,
        "bug": "TP-sharded gradients treated as replicated: counted on rank 0 only",
    },
    {
        "id": "B20",
        "title": "Expert gradients scaled by the wrong group size",
        "link": "https://github.com/deepspeedai/DeepSpeed/pull/5259",
        "bug_class": "wrong configuration",
        "mesh": DP_TP_MESH,
        "args": {"x": ((8, 16), ("dp", None), F32), "dy": ((8, 16), ("dp", None), F32)},
        "out_spec": (),
        "baseline": b20_base,
        "body": b20_body,
        "bug": "the dp-summed gradient averaged over the expert group's size (4), not dp's (2)",
    },
    {
        "id": "B33",
        "title": "Embedding gradient reduced over the tensor-parallel group",
        "link": "https://github.com/NVIDIA/Megatron-LM/issues/844",
        "bug_class": "wrong collective",
        "mesh": DP_TP_MESH,
        "args": {
            "table": ((32, 8), ("tp", None), F32),
            "ids": ((16,), ("dp",), "int32"),
        },
        "out_spec": ("tp", None),
        "baseline": b33_base,
        "body": b33_body,
        "bug": "the vocab-parallel embedding's gradient (autograd's scatter of each replica's "
        "tokens into this device's rows) summed over the tp devices, which hold other rows, "
        "instead of over the dp replicas, which hold the same rows for other tokens",
    },
    {
        "id": "B32",
        "title": "Ulysses all-to-all output reshaped with the wrong shape",
        "link": "https://github.com/deepspeedai/DeepSpeed/pull/8317",
        "bug_class": "layout",
        "mesh": TP_MESH,
        "args": {"x": ((16, 2, 8, 4), ("tp", None, None, None), F32)},
        "out_spec": ("tp", None, None, None),
        "baseline": b32_base,
        "body": b32_body,
        "bug": "the all-to-all output viewed as (batch, seq) and swapped back: same size, "
        "wrong order",
    },
    {
        "id": "B22",
        "title": "Base-2 LSE fed to a natural-log merge (chunked prefix)",
        "link": "https://github.com/sgl-project/sglang/issues/40903",
        "bug_class": "split-KV combine",
        "mesh": TP_MESH,
        "args": SPLIT_KV,
        "out_spec": (),
        "baseline": decode_base,
        "body": b22_body,
        "bug": "chunk states in natural log weighted by base-2 exponentials in the merge",
    },
    {
        "id": "B23",
        "title": "Split-KV LSE scaled twice",
        "link": "https://github.com/HKUSTDial/flash-sparse-attention/pull/106",
        "bug_class": "split-KV combine",
        "mesh": TP_MESH,
        "args": SPLIT_KV,
        "out_spec": (),
        "baseline": b23_base,
        "body": b23_body,
        "bug": "the chunk max, already of scaled scores, is scaled again in the merge weight",
    },
    {
        "id": "B24",
        "title": "Attention-sink logit counted twice in the split-KV combine",
        "link": "https://github.com/ROCm/rocm-libraries/issues/12227",
        "bug_class": "split-KV combine",
        "mesh": TP_MESH,
        "args": {**SPLIT_KV, "sink": ((2, 4), (), F32)},
        "out_spec": (),
        "baseline": b24_base,
        "body": b24_body,
        "bug": "every chunk adds the sink to its own sum, so the combine counts it tp times",
    },
]
