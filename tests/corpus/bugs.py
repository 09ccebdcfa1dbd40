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


def gelu(x: Array) -> Array:
    return jax.nn.gelu(x, approximate=True)


def rank() -> Array:
    return lax.axis_index("tp")


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


TP_MESH = {"tp": TP}
DP_TP_MESH = {"dp": 2, "tp": TP}
F32, BF16 = "float32", "bfloat16"
ROW_PARALLEL = {"x": ((8, 32), (None, "tp"), F32), "w": ((32, 16), ("tp", None), F32)}

ENTRIES: list[dict] = [
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
        "expected_fixed": "unknown",
        "why_unknown": "no rule relates a reshape splitting a replicated weight's column dim"
        " ([gate|up] -> [2, ffn]) to the baseline, nor a slice at offset ffn + rank*f",
        "bug": "one contiguous column block of [gate|up] per rank, split locally",
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
]
