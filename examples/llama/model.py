"""Llama-3 forward pass and loss: a single-device baseline and its tensor-parallel body.

`llama` is the reference Scalify checks against. `tp_llama` is the per-device body run
under `jax.shard_map` on a 1-D ("tp",) mesh, Megatron style: vocab-parallel embedding,
LM head and cross-entropy; q (and, when kv_heads >= tp, k/v) heads, o-proj rows and MLP
gate/up columns and down rows split over "tp"; every reduction an explicit `lax.psum` /
`lax.pmax`. `decoder` / `tp_decoder` are the decoder stack alone (hidden states in, final
RMSNorm out): no device index and no gather when kv_heads >= tp. Each `bug` variant
changes exactly one line, tagged with a trailing BUG comment naming it, so the verifier's
report can be checked against the line that computes the wrong operation.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Literal, get_args

import jax
import jax.numpy as jnp
from config import LlamaConfig
from jax import Array, lax
from jax.sharding import PartitionSpec as P

Params = dict[str, Any]
Part = Literal["full", "layers", "sp_layers", "train_layers", "train_step"]
PARTS: tuple[Part, ...] = get_args(Part)
Bug = Literal[
    "heads_reshape_wrong_factor",
    "wrong_transpose",
    "bias_before_allreduce",
    "vocab_ce_on_gathered_logits",
    "missing_mlp_allreduce",
    "kv_heads_wrong_split",
    "sp_slice_not_scatter",
    "fused_qkv_one_block",
    "fused_gate_up_one_block",
    "qk_norm_local_heads",
    "relaid_wrong_order",
    "padded_logits_in_softmax",
]
BUGS: tuple[Bug, ...] = get_args(Bug)  # the names once: the Literal's, in order
FUSED_BUGS = frozenset({"fused_qkv_one_block", "fused_gate_up_one_block", "relaid_wrong_order"})


def attention_shapes(cfg: LlamaConfig) -> Params:
    """Global shapes of one layer's attention weights, as `attention` reads them (Mixtral's
    layers take them too: its attention is this one)."""
    d, hd = cfg.hidden, cfg.head_dim
    return {
        "attn_norm": (d,),
        "wq": (d, cfg.heads * hd),
        "wk": (d, cfg.kv_heads * hd),
        "wv": (d, cfg.kv_heads * hd),
        "wo": (cfg.heads * hd, d),
    }


def param_shapes(cfg: LlamaConfig) -> Params:
    """Global shape of every weight, as the params pytree both paths take."""
    d, hd = cfg.hidden, cfg.head_dim
    layer = {
        **attention_shapes(cfg),
        "mlp_norm": (d,),
        "w_gate": (d, cfg.ffn),
        "w_up": (d, cfg.ffn),
        "w_down": (cfg.ffn, d),
    }
    if cfg.fused:
        for name in ("wq", "wk", "wv", "w_gate", "w_up"):
            del layer[name]
        layer["wqkv"] = (d, (cfg.heads + 2 * cfg.kv_heads) * hd)
        layer["w_gate_up"] = (d, 2 * cfg.ffn)
    if cfg.qk_norm:  # OLMo-2 style: one RMSNorm over all q (k) heads together
        layer["q_norm"], layer["k_norm"] = (cfg.heads * hd,), (cfg.kv_heads * hd,)
    return {
        "embed": (cfg.vocab, d),
        "layers": [dict(layer) for _ in range(cfg.layers)],
        "final_norm": (d,),
        "lm_head": (d, cfg.vocab),
    }


def part_params(params: Params, part: Part) -> Params:
    """The subtree a part reads: everything for "full", layers + final norm for the decoder
    stack parts ("layers", "sp_layers", "train_layers", "train_step").

    Works on any tree shaped like `param_shapes` (shapes, specs, arrays).
    """
    return params if part == "full" else {k: params[k] for k in ("layers", "final_norm")}


# Bugs whose line is on the sequence-parallel path (the others sit in tp_attention / tp_mlp
# or in the embedding and loss).
SP_BUGS = frozenset(
    {
        "heads_reshape_wrong_factor",
        "wrong_transpose",
        "kv_heads_wrong_split",
        "sp_slice_not_scatter",
    }
)


def kv_sharded(cfg: LlamaConfig, tp: int) -> bool:
    """Whether wk/wv split over "tp" by in_specs: each device then owns kv_heads/tp heads."""
    return cfg.kv_heads >= tp


def tp_param_specs(cfg: LlamaConfig, tp: int) -> Params:
    """How shard_map slices each weight over "tp" (the in_specs of `tp_llama`).

    wk/wv are column-parallel like wq when kv_heads >= tp. Otherwise a device's q heads
    share one kv head that other devices read too, so wk/wv stay whole and each device
    slices the kv head it reads itself (see `slice_kv_head`).
    """
    kv = P(None, "tp") if kv_sharded(cfg, tp) else P()
    layer = {
        "attn_norm": P(),
        "wq": P(None, "tp"),  # column-parallel: heads/tp q heads per device
        "wk": kv,
        "wv": kv,
        "wo": P("tp", None),  # row-parallel over the same heads
        "mlp_norm": P(),
        "w_gate": P(None, "tp"),
        "w_up": P(None, "tp"),
        "w_down": P("tp", None),
    }
    if cfg.fused:  # whole on every device; each device cuts its block of every part
        for name in ("wq", "wk", "wv", "w_gate", "w_up"):
            del layer[name]
        layer["wqkv"], layer["w_gate_up"] = P(), P()
    if cfg.qk_norm:  # per-feature weights, split like the q and k columns
        layer["q_norm"], layer["k_norm"] = P("tp"), P("tp")
    return {
        "embed": P("tp", None),  # vocab-parallel rows
        "layers": [dict(layer) for _ in range(cfg.layers)],
        "final_norm": P(),
        "lm_head": P(None, "tp"),  # vocab-parallel columns
    }


# ---- pieces shared by both paths: identical elementwise code on both sides ----


def rms_norm(x: Array, w: Array, eps: float) -> Array:
    return x * lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope_tables(seq: int, cfg: LlamaConfig) -> tuple[Array, Array]:
    """cos/sin of shape (S, 1, head_dim), broadcast over batch and heads: each frequency on
    dims i and i + head_dim/2 (rotate-half), or on dims 2i and 2i+1 (interleaved)."""
    inv_freq = 1.0 / cfg.rope_theta ** (jnp.arange(0, cfg.head_dim, 2) / cfg.head_dim)
    angles = jnp.arange(seq)[:, None] * inv_freq[None, :]  # (S, head_dim/2)
    if cfg.rope_interleaved:
        angles = jnp.repeat(angles, 2, axis=-1)[:, None, :]
    else:
        angles = jnp.concatenate([angles, angles], axis=-1)[:, None, :]
    return jnp.cos(angles), jnp.sin(angles)


def apply_rope(x: Array, cos: Array, sin: Array, interleaved: bool = False) -> Array:
    """RoPE on x of shape (B, S, heads, head_dim): rotate-half (HF Llama) pairs dim i with
    i + head_dim/2; interleaved (Meta's complex form) pairs dims 2i and 2i+1."""
    if interleaved:
        pairs = x.reshape(*x.shape[:-1], x.shape[-1] // 2, 2)
        rotated = jnp.stack([-pairs[..., 1], pairs[..., 0]], axis=-1).reshape(x.shape)
        return x * cos + rotated * sin
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return x * cos + jnp.concatenate([-x2, x1], axis=-1) * sin


def rope(x: Array, cos: Array, sin: Array, cfg: LlamaConfig) -> Array:
    return apply_rope(x, cos, sin, cfg.rope_interleaved)


def causal_attention(q: Array, k: Array, v: Array) -> Array:
    """Softmax attention over (B, heads, S, head_dim) with a causal mask."""
    seq = q.shape[2]
    scores = q @ k.swapaxes(-1, -2) / jnp.sqrt(q.shape[-1])
    causal = jnp.arange(seq)[:, None] >= jnp.arange(seq)[None, :]
    scores = jnp.where(causal, scores, -jnp.inf)
    p = jnp.exp(scores - jnp.max(scores, axis=-1, keepdims=True))
    p = p / jnp.sum(p, axis=-1, keepdims=True)
    return p @ v


def swiglu(x: Array, w_gate: Array, w_up: Array) -> Array:
    return jax.nn.silu(x @ w_gate) * (x @ w_up)


def qkv_sizes(cfg: LlamaConfig, parts: int = 1) -> list[int]:
    """Column counts of q, k and v in a [Q|K|V] weight (or in one of `parts` blocks)."""
    hd = cfg.head_dim
    return [cfg.heads * hd // parts, cfg.kv_heads * hd // parts, cfg.kv_heads * hd // parts]


def split_at(x: Array, sizes: list[int]) -> list[Array]:
    """x cut along its last dim into pieces of these sizes."""
    return jnp.split(x, [sum(sizes[: i + 1]) for i in range(len(sizes) - 1)], axis=-1)


def project_qkv(h: Array, layer: Params, cfg: LlamaConfig) -> list[Array]:
    if "wqkv" in layer:
        return split_at(h @ layer["wqkv"], qkv_sizes(cfg))
    return [project(h, layer[w], cfg, "baseline") for w in ("wq", "wk", "wv")]


def gated(h: Array, layer: Params) -> Array:
    if "w_gate_up" in layer:
        g, u = jnp.split(h @ layer["w_gate_up"], 2, axis=-1)
        return jax.nn.silu(g) * u
    return swiglu(h, layer["w_gate"], layer["w_up"])


# ---- single-device baseline ----


def attention(x: Array, layer: Params, cos: Array, sin: Array, cfg: LlamaConfig) -> Array:
    b, s, _ = x.shape
    hd = cfg.head_dim
    h = rms_norm(x, layer["attn_norm"], cfg.rms_eps)
    q, k, v = project_qkv(h, layer, cfg)
    if "q_norm" in layer:
        q = rms_norm(q, layer["q_norm"], cfg.rms_eps)
        k = rms_norm(k, layer["k_norm"], cfg.rms_eps)
    q = q.reshape(b, s, cfg.heads, hd)
    k = k.reshape(b, s, cfg.kv_heads, hd)
    v = v.reshape(b, s, cfg.kv_heads, hd)
    q, k = rope(q, cos, sin, cfg), rope(k, cos, sin, cfg)
    k = jnp.repeat(k, cfg.heads // cfg.kv_heads, axis=2)  # GQA: q head i reads kv head i//group
    v = jnp.repeat(v, cfg.heads // cfg.kv_heads, axis=2)
    o = causal_attention(q.transpose(0, 2, 1, 3), k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3))
    o = o.transpose(0, 2, 1, 3).reshape(b, s, cfg.heads * hd)
    return x + o @ layer["wo"]


def mlp(x: Array, layer: Params, cfg: LlamaConfig) -> Array:
    h = rms_norm(x, layer["mlp_norm"], cfg.rms_eps)
    return x + gated(h, layer) @ layer["w_down"]


def cross_entropy(logits: Array, targets: Array, one_hot: bool = False) -> Array:
    """Mean over tokens of logsumexp(logits) - logits[target] (the target logit picked by a
    gather, or by a one-hot contraction as TPU code often writes it)."""
    m = jnp.max(logits, axis=-1)
    lse = m + jnp.log(jnp.sum(jnp.exp(logits - m[..., None]), axis=-1))
    if one_hot:
        hot = jax.nn.one_hot(targets, logits.shape[-1], dtype=logits.dtype)
        return jnp.mean(lse - jnp.sum(logits * hot, axis=-1))
    target_logit = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    return jnp.mean(lse - target_logit)


def embed_tokens(embed: Array, tokens: Array, cfg: LlamaConfig) -> Array:
    """Rows of the embedding: a gather, or a one-hot matmul (T5X/Flax `one_hot=True`)."""
    if cfg.one_hot_lookup:
        return jax.nn.one_hot(tokens, embed.shape[0], dtype=embed.dtype) @ embed
    return jnp.take(embed, tokens, axis=0)


def decoder(params: Params, x: Array, *, cfg: LlamaConfig) -> Array:
    """Hidden states (B, S, hidden) through every decoder layer and the final RMSNorm."""
    cos, sin = rope_tables(x.shape[1], cfg)
    for layer in params["layers"]:
        x = attention(x, layer, cos, sin, cfg)
        x = mlp(x, layer, cfg)
    return rms_norm(x, params["final_norm"], cfg.rms_eps)


def llama_logits(params: Params, tokens: Array, *, cfg: LlamaConfig) -> Array:
    """tokens (B, S) int32 -> logits (B, S, vocab)."""
    x = embed_tokens(params["embed"], tokens, cfg)
    return decoder(params, x, cfg=cfg) @ params["lm_head"]


def llama(params: Params, tokens: Array, targets: Array, *, cfg: LlamaConfig) -> Array:
    """Single-device baseline: next-token cross-entropy of the whole model."""
    return cross_entropy(llama_logits(params, tokens, cfg=cfg), targets, cfg.one_hot_lookup)


# ---- tensor-parallel per-device body ----


def tp_embed(embed: Array, tokens: Array, one_hot: bool = False) -> Array:
    """Vocab-parallel lookup: this device holds rows [start, start + vocab/tp)."""
    rows = embed.shape[0]
    local = tokens - lax.axis_index("tp") * rows
    if one_hot:  # tokens outside the block have an all-zero row: no mask needed
        return lax.psum(jax.nn.one_hot(local, rows, dtype=embed.dtype) @ embed, "tp")
    mine = (local >= 0) & (local < rows)
    x = jnp.take(embed, jnp.clip(local, 0, rows - 1), axis=0)
    return lax.psum(jnp.where(mine[..., None], x, 0.0), "tp")


def slice_kv_head(
    wk: Array, wv: Array, local_heads: int, cfg: LlamaConfig, bug: Bug | None
) -> tuple[Array, Array]:
    """kv_heads < tp: cut the one kv head this device's q heads read from whole wk/wv."""
    hd = cfg.head_dim
    group = cfg.heads // cfg.kv_heads
    if bug == "kv_heads_wrong_split":
        kv_start = lax.axis_index("tp") * local_heads % cfg.kv_heads  # BUG: kv_heads_wrong_split
    else:
        kv_start = lax.axis_index("tp") * local_heads // group  # kv head of the first q head
    wk = lax.dynamic_slice_in_dim(wk, kv_start * hd, hd, axis=1)
    wv = lax.dynamic_slice_in_dim(wv, kv_start * hd, hd, axis=1)
    return wk, wv


def attention_partial(
    h: Array, layer: Params, cos: Array, sin: Array, cfg: LlamaConfig, bug: Bug | None
) -> Array:
    """Column-parallel q/k/v over this device's heads, attention, row-parallel o-proj: a
    partial sum over the devices' heads (h: normalised hidden states, whole sequence)."""
    b, s, _ = h.shape
    hd = cfg.head_dim
    local_heads = layer["wo"].shape[0] // hd  # this device's q heads: [i*local_heads, ...)
    tp = cfg.heads // local_heads
    if "wqkv" in layer:  # fused; kv_heads >= tp: every part splits over the devices
        if bug == "fused_qkv_one_block":
            wqkv, n, r = layer["wqkv"], layer["wqkv"].shape[1] // tp, lax.axis_index("tp")
            w = lax.dynamic_slice_in_dim(wqkv, r * n, n, 1)  # BUG: fused_qkv_one_block
        else:
            w = blocks_of_parts(layer["wqkv"], qkv_sizes(cfg), tp)
        q, k, v = split_at(h @ w, qkv_sizes(cfg, tp))
    else:
        wk, wv = layer["wk"], layer["wv"]  # column-parallel when kv_heads >= tp
        if not kv_sharded(cfg, tp):  # whole: slice the kv head we read
            wk, wv = slice_kv_head(wk, wv, local_heads, cfg, bug)
        q, k, v = (project(h, w, cfg, "tp") for w in (layer["wq"], wk, wv))  # local heads
    if "q_norm" in layer:  # the norms span all heads: their statistic sums over devices
        q = heads_rms_norm(q, layer["q_norm"], cfg.heads * hd, cfg.rms_eps, bug)
        k = heads_rms_norm(k, layer["k_norm"], cfg.kv_heads * hd, cfg.rms_eps, None)
    local_kv = k.shape[-1] // hd  # kv_heads/tp, or the 1 shared head if kv_heads < tp
    if bug == "heads_reshape_wrong_factor":
        q = q.reshape(b, s, hd, local_heads).swapaxes(2, 3)  # BUG: heads_reshape_wrong_factor
    else:
        q = q.reshape(b, s, local_heads, hd)
    k = k.reshape(b, s, local_kv, hd)
    v = v.reshape(b, s, local_kv, hd)
    q, k = rope(q, cos, sin, cfg), rope(k, cos, sin, cfg)
    k = jnp.repeat(k, local_heads // local_kv, axis=2)
    v = jnp.repeat(v, local_heads // local_kv, axis=2)
    o = causal_attention(q.transpose(0, 2, 1, 3), k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3))
    if bug == "wrong_transpose":
        o = o.transpose(0, 2, 3, 1).reshape(b, s, local_heads * hd)  # BUG: wrong_transpose
    else:
        o = o.transpose(0, 2, 1, 3).reshape(b, s, local_heads * hd)
    return o @ layer["wo"]  # row-parallel: a partial sum over this device's heads


def heads_rms_norm(x: Array, w: Array, width: int, eps: float, bug: Bug | None) -> Array:
    """RMSNorm over all heads of a projection whose columns (heads) are split over "tp":
    the mean square is the all-reduced sum of squares over the whole width."""
    if bug == "qk_norm_local_heads":
        ms = jnp.mean(x * x, axis=-1, keepdims=True)  # BUG: qk_norm_local_heads
    else:
        ms = lax.psum(jnp.sum(x * x, axis=-1, keepdims=True), "tp") / width
    return x * lax.rsqrt(ms + eps) * w


def project(h: Array, w: Array, cfg: LlamaConfig, side: str) -> Array:
    """h @ w, or (on the side `heads_view` names, as Flax's DenseGeneral writes it) straight
    into heads with w viewed as (hidden, heads, head_dim); (B, S, heads * head_dim) either
    way."""
    if cfg.heads_view != side:
        return h @ w
    heads = jnp.einsum("bsm,mhd->bshd", h, w.reshape(w.shape[0], -1, cfg.head_dim))
    return heads.reshape(*h.shape[:2], -1)


def one_block(w: Array, tp: int) -> Array:
    """This device's contiguous column block of a whole weight."""
    n = w.shape[1] // tp
    return lax.dynamic_slice_in_dim(w, lax.axis_index("tp") * n, n, 1)


def blocks_of_parts(w: Array, sizes: list[int], tp: int) -> Array:
    """This device's column block of every part of a whole fused weight, side by side: the
    per-part layout its local split expects ([Q_i|K_i|V_i], [gate_i|up_i])."""
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    return jnp.concatenate(
        [one_block(w[:, a : a + n], tp) for a, n in zip(starts, sizes, strict=True)], axis=1
    )


def relaid(w: Array, parts: int, tp: int, bug: Bug | None = None) -> Array:
    """A fused weight of `parts` equal parts with its columns re-laid out so that each
    device's block of every part sits side by side: [g_0|u_0|g_1|u_1|...] from [g|u]."""
    rows, width = w.shape
    if bug == "relaid_wrong_order":
        w = w.reshape(rows, tp, parts, width // parts // tp)  # BUG: relaid_wrong_order
    else:
        w = w.reshape(rows, parts, tp, width // parts // tp).transpose(0, 2, 1, 3)
    return w.reshape(rows, width)


def tp_gated(h: Array, layer: Params, bug: Bug | None, cut: str = "parts") -> Array:
    """silu(h @ gate) * (h @ up) on this device's ffn columns."""
    if "w_gate_up" not in layer:
        return swiglu(h, layer["w_gate"], layer["w_up"])
    ffn = layer["w_gate_up"].shape[1] // 2
    tp = ffn // layer["w_down"].shape[0]
    if bug == "fused_gate_up_one_block":
        wgu, n, r = layer["w_gate_up"], 2 * ffn // tp, lax.axis_index("tp")
        w = lax.dynamic_slice_in_dim(wgu, r * n, n, 1)  # BUG: fused_gate_up_one_block
    elif cut == "relaid":
        w = one_block(relaid(layer["w_gate_up"], 2, tp, bug), tp)
    else:
        w = blocks_of_parts(layer["w_gate_up"], [ffn, ffn], tp)
    g, u = jnp.split(h @ w, 2, axis=-1)
    return jax.nn.silu(g) * u


def tp_attention(
    x: Array, layer: Params, cos: Array, sin: Array, cfg: LlamaConfig, bug: Bug | None
) -> Array:
    h = rms_norm(x, layer["attn_norm"], cfg.rms_eps)
    partial_sum = attention_partial(h, layer, cos, sin, cfg, bug)
    if bug == "bias_before_allreduce":
        return lax.psum(x + partial_sum, "tp")  # BUG: bias_before_allreduce
    return x + lax.psum(partial_sum, "tp")  # the residual is replicated: add it once


def tp_mlp(x: Array, layer: Params, cfg: LlamaConfig, bug: Bug | None) -> Array:
    h = rms_norm(x, layer["mlp_norm"], cfg.rms_eps)
    partial_sum = tp_gated(h, layer, bug, cfg.fused_cut) @ layer["w_down"]
    if bug == "missing_mlp_allreduce":
        return x + partial_sum  # BUG: missing_mlp_allreduce
    return x + lax.psum(partial_sum, "tp")


def tp_cross_entropy(
    logits: Array,
    targets: Array,
    one_hot: bool = False,
    vocab: int | None = None,
    bug: Bug | None = None,
) -> Array:
    """Vocab-parallel cross-entropy on logits split over "tp" along the vocab. `vocab`: the
    true vocabulary of a padded one, whose padded logits the softmax must not see."""
    cols = logits.shape[-1]
    if vocab is not None and bug != "padded_logits_in_softmax":  # BUG: padded_logits_in_softmax
        column = lax.axis_index("tp") * cols + jnp.arange(cols)
        logits = jnp.where(column < vocab, logits, -jnp.inf)
    m = lax.pmax(jnp.max(logits, axis=-1), "tp")
    lse = m + jnp.log(lax.psum(jnp.sum(jnp.exp(logits - m[..., None]), axis=-1), "tp"))
    local = targets - lax.axis_index("tp") * cols
    if one_hot:
        hot = jax.nn.one_hot(local, cols, dtype=logits.dtype)
        return jnp.mean(lse - lax.psum(jnp.sum(logits * hot, axis=-1), "tp"))
    mine = (local >= 0) & (local < cols)
    target_logit = jnp.take_along_axis(logits, jnp.clip(local, 0, cols - 1)[..., None], axis=-1)
    target_logit = lax.psum(jnp.where(mine, target_logit[..., 0], 0.0), "tp")
    return jnp.mean(lse - target_logit)


def stack_loss(params: Params, x: Array, *, cfg: LlamaConfig) -> Array:
    """A training loss over the decoder stack alone (the sum of squared hidden states), for
    the backward pass of every layer without the embedding and LM head."""
    return jnp.sum(jnp.square(decoder(params, x, cfg=cfg)))


def tp_stack_loss(params: Params, x: Array, *, cfg: LlamaConfig) -> Array:
    """`stack_loss` on each device's shards: the stack's output is replicated, so is the
    loss."""
    return jnp.sum(jnp.square(tp_decoder(params, x, cfg=cfg)))


# AdamW's constants for the one step the training-step part takes (bias corrections folded in)
ADAMW = {"lr": 1e-3, "b1": 0.9, "b2": 0.95, "eps": 1e-8, "wd": 0.1}


def adamw(params: Params, m: Params, v: Params, grads: Params) -> tuple[Params, Params, Params]:
    """One AdamW update, weight by weight: the same elementwise code on a whole weight and on
    a device's block of it."""
    c = ADAMW

    def one(p: Array, m1: Array, v1: Array, g: Array) -> tuple[Array, Array, Array]:
        m2 = c["b1"] * m1 + (1 - c["b1"]) * g
        v2 = c["b2"] * v1 + (1 - c["b2"]) * g * g
        step = m2 / (1 - c["b1"]) / (jnp.sqrt(v2 / (1 - c["b2"])) + c["eps"])
        return p - c["lr"] * (step + c["wd"] * p), m2, v2

    flat, tree = jax.tree.flatten(params)
    updated = [
        one(*w) for w in zip(flat, *(jax.tree.leaves(t) for t in (m, v, grads)), strict=True)
    ]
    return tuple(jax.tree.unflatten(tree, [u[i] for u in updated]) for i in range(3))


def train_step(params: Params, m: Params, v: Params, x: Array, *, cfg: LlamaConfig):
    """(loss, params, m, v) after one AdamW step on `stack_loss` over the whole batch."""
    loss, grads = jax.value_and_grad(partial(stack_loss, cfg=cfg))(params, x)
    return (loss, *adamw(params, m, v, grads))


def dp_tp_train_step(params: Params, m: Params, v: Params, x: Array, *, cfg: LlamaConfig):
    """`train_step` on each device of a (dp, tp) mesh: its tp shards of the weights and of
    the optimizer's moments, its dp slice of the batch. The loss sums the slices' losses over
    dp, so each weight's gradient (a weight is the same on every dp device) is JAX's
    transpose of that sum: reduced over dp once, as data parallelism must."""

    def loss_fn(p: Params, x_local: Array) -> Array:
        return lax.psum(tp_stack_loss(p, x_local, cfg=cfg), "dp")

    loss, grads = jax.value_and_grad(loss_fn)(params, x)
    return (loss, *adamw(params, m, v, grads))


def tp_decoder(
    params: Params,
    x: Array,
    *,
    cfg: LlamaConfig,
    bug: Bug | None = None,
    bug_layer: int | None = None,
    sequence_parallel: bool = False,
) -> Array:
    """Per-device decoder stack: replicated hidden states in, replicated hidden states out;
    with `sequence_parallel`, x and the result are this device's slice of the sequence.
    `bug_layer` puts the bug in that layer only (all layers when None)."""
    seq = x.shape[1] * (lax.axis_size("tp") if sequence_parallel else 1)
    cos, sin = rope_tables(seq, cfg)
    one_layer = sp_layer if sequence_parallel else tp_layer
    return layer_stack(params, x, cos, sin, cfg, bug, bug_layer, one_layer)


def tp_layer(
    x: Array, layer: Params, cos: Array, sin: Array, cfg: LlamaConfig, bug: Bug | None
) -> Array:
    return tp_mlp(tp_attention(x, layer, cos, sin, cfg, bug), layer, cfg, bug)


def layer_stack(
    params: Params,
    x: Array,
    cos: Array,
    sin: Array,
    cfg: LlamaConfig,
    bug: Bug | None,
    bug_layer: int | None,
    one_layer,
) -> Array:
    """`one_layer` over every layer, then the final RMSNorm; `bug_layer` puts the bug in
    that layer only (all layers when None)."""
    for index, layer in enumerate(params["layers"]):
        here = bug if bug_layer is None or index == bug_layer else None
        x = one_layer(x, layer, cos, sin, cfg, here)
    return rms_norm(x, params["final_norm"], cfg.rms_eps)


def sp_layer(
    x: Array, layer: Params, cos: Array, sin: Array, cfg: LlamaConfig, bug: Bug | None
) -> Array:
    """One decoder layer with Megatron sequence parallelism: x is this device's slice of the
    sequence; the norms and residual adds run on it, an all-gather along the sequence feeds
    each column-parallel block, and a reduce-scatter along the sequence completes each
    row-parallel one."""
    gather = partial(lax.all_gather, axis_name="tp", axis=1, tiled=True)
    scatter = partial(lax.psum_scatter, axis_name="tp", scatter_dimension=1, tiled=True)
    h = gather(rms_norm(x, layer["attn_norm"], cfg.rms_eps))
    x = x + scatter(attention_partial(h, layer, cos, sin, cfg, bug))
    h = gather(rms_norm(x, layer["mlp_norm"], cfg.rms_eps))
    partial_sum = tp_gated(h, layer, bug, cfg.fused_cut) @ layer["w_down"]
    if bug == "sp_slice_not_scatter":
        start, n = lax.axis_index("tp") * x.shape[1], x.shape[1]
        mine = lax.dynamic_slice_in_dim(partial_sum, start, n, 1)  # BUG: sp_slice_not_scatter
        return x + mine
    return x + scatter(partial_sum)


def tp_llama_logits(
    params: Params, tokens: Array, *, cfg: LlamaConfig, bug: Bug | None = None
) -> Array:
    """Per-device body up to the LM head: returns this device's vocab slice of the logits."""
    x = tp_embed(params["embed"], tokens, cfg.one_hot_lookup)
    return tp_decoder(params, x, cfg=cfg, bug=bug) @ params["lm_head"]


def tp_llama(
    params: Params, tokens: Array, targets: Array, *, cfg: LlamaConfig, bug: Bug | None = None
) -> Array:
    """Per-device body: params sliced by `tp_param_specs`, tokens/targets replicated."""
    out = tp_llama_logits(params, tokens, cfg=cfg, bug=bug)  # (B, S, vocab/tp)
    if bug == "vocab_ce_on_gathered_logits":
        out = lax.all_gather(out, "tp", axis=2, tiled=True)  # BUG: vocab_ce_on_gathered_logits
    return tp_cross_entropy(out, targets, cfg.one_hot_lookup, cfg.vocab_unpadded, bug)
