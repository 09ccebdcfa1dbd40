"""Mixtral decoder stack: a single-device baseline and its expert- and tensor-parallel body.

`decoder` is the reference. `ep_decoder` is the per-device body on a 2-D ("ep", "tp") mesh:
attention is Llama's tensor-parallel attention over "tp" (replicated over "ep"); in the MoE
block each device holds experts/ep experts ("ep") and, inside each, a ffn/tp slice ("tp").
Routing is token-choice top-k in the dense one-hot/einsum form: every device computes the
router on the replicated tokens, takes its own experts' columns of the combine weights,
runs its experts and contributes a partial sum over both axes. Each bug changes exactly one
line, tagged with a trailing BUG comment naming it.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any, Literal, get_args

import jax
import jax.numpy as jnp
from jax import Array, lax
from jax.sharding import PartitionSpec as P
from mixtral_config import MixtralConfig

LLAMA = Path(__file__).resolve().parents[1] / "llama"


def _load_llama() -> Any:
    """examples/llama/model.py under its own module name (both examples name theirs model)."""
    if "llama_model" in sys.modules:
        return sys.modules["llama_model"]
    sys.path.insert(0, str(LLAMA))  # for its `from config import LlamaConfig`
    spec = importlib.util.spec_from_file_location("llama_model", LLAMA / "model.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["llama_model"] = module
    spec.loader.exec_module(module)
    return module


llama = _load_llama()

Params = dict[str, Any]
SharedExpertBug = Literal["shared_expert_not_reduced", "shared_expert_reduced_over_ep"]
Bug = Literal[
    "expert_reduce_over_tp_only",
    "global_expert_ids_as_local",
    "renormalised_over_local_experts",
    SharedExpertBug,  # a nested Literal's names count as this one's, in place
]
BUGS: tuple[Bug, ...] = get_args(Bug)  # the names once: the Literal's, in order
SHARED_EXPERT_BUGS = frozenset(get_args(SharedExpertBug))


def param_shapes(cfg: MixtralConfig) -> Params:
    d, e, f = cfg.hidden, cfg.experts, cfg.ffn
    layer = {
        **llama.attention_shapes(cfg),
        "moe_norm": (d,),
        "router": (d, e),
        "w1": (e, d, f),  # gate
        "w3": (e, d, f),  # up
        "w2": (e, f, d),  # down
    }
    if cfg.shared_ffn:
        layer.update(
            {"ws1": (d, cfg.shared_ffn), "ws3": (d, cfg.shared_ffn), "ws2": (cfg.shared_ffn, d)}
        )
    return {"layers": [dict(layer) for _ in range(cfg.layers)], "final_norm": (d,)}


def param_specs(cfg: MixtralConfig) -> Params:
    """How shard_map slices each weight over the ("ep", "tp") mesh."""
    layer = {
        "attn_norm": P(),
        "wq": P(None, "tp"),
        "wk": P(None, "tp"),
        "wv": P(None, "tp"),
        "wo": P("tp", None),
        "moe_norm": P(),
        "router": P(),  # every device routes every token
        "w1": P("ep", None, "tp"),  # its experts, column-parallel inside each
        "w3": P("ep", None, "tp"),
        "w2": P("ep", "tp", None),  # row-parallel inside each expert
    }
    if cfg.shared_ffn:  # the shared expert: column- then row-parallel over tp, on every ep
        layer.update({"ws1": P(None, "tp"), "ws3": P(None, "tp"), "ws2": P("tp", None)})
    return {"layers": [dict(layer) for _ in range(cfg.layers)], "final_norm": P()}


def combine_weights(h: Array, router: Array, top_k: int) -> Array:
    """(B, S, experts): each token's softmax over its top-k router logits, 0 elsewhere."""
    logits = h @ router
    top, index = lax.top_k(logits, top_k)
    one_hot = jax.nn.one_hot(index, router.shape[1], dtype=h.dtype)  # (B, S, k, experts)
    return jnp.einsum("bsk,bske->bse", jax.nn.softmax(top, axis=-1), one_hot)


def experts(h: Array, w1: Array, w3: Array, w2: Array) -> Array:
    """Every expert (SwiGLU) on every token: (experts, B, S, hidden)."""
    gate = jnp.einsum("bsh,ehf->ebsf", h, w1)
    up = jnp.einsum("bsh,ehf->ebsf", h, w3)
    return jnp.einsum("ebsf,efh->ebsh", jax.nn.silu(gate) * up, w2)


def shared_expert(h: Array, layer: Params) -> Array:
    """The expert every token goes through (SwiGLU)."""
    return (jax.nn.silu(h @ layer["ws1"]) * (h @ layer["ws3"])) @ layer["ws2"]


def moe(x: Array, layer: Params, cfg: MixtralConfig) -> Array:
    h = llama.rms_norm(x, layer["moe_norm"], cfg.rms_eps)
    weights = combine_weights(h, layer["router"], cfg.top_k)
    outputs = experts(h, layer["w1"], layer["w3"], layer["w2"])
    y = x + jnp.einsum("bse,ebsh->bsh", weights, outputs)
    return y + shared_expert(h, layer) if cfg.shared_ffn else y


def decoder(params: Params, x: Array, *, cfg: MixtralConfig) -> Array:
    cos, sin = llama.rope_tables(x.shape[1], cfg)
    for layer in params["layers"]:
        x = llama.attention(x, layer, cos, sin, cfg)
        x = moe(x, layer, cfg)
    return llama.rms_norm(x, params["final_norm"], cfg.rms_eps)


def ep_moe(x: Array, layer: Params, cfg: MixtralConfig, bug: Bug | None) -> Array:
    h = llama.rms_norm(x, layer["moe_norm"], cfg.rms_eps)
    local = layer["w1"].shape[0]  # experts on this device: [start, start + local)
    weights = combine_weights(h, layer["router"], cfg.top_k)  # route over all experts
    if bug == "global_expert_ids_as_local":
        mine = weights[:, :, :local]  # BUG: global_expert_ids_as_local
    else:  # this device's columns of the combine weights
        mine = lax.dynamic_slice_in_dim(weights, lax.axis_index("ep") * local, local, axis=2)
    if bug == "renormalised_over_local_experts":
        mine = mine / jnp.sum(mine, axis=-1, keepdims=True)  # BUG: renormalised_over_local_experts
    outputs = experts(h, layer["w1"], layer["w3"], layer["w2"])  # partial over "tp"
    partial_sum = jnp.einsum("bse,ebsh->bsh", mine, outputs)  # and over "ep" (local experts)
    if bug == "expert_reduce_over_tp_only":
        return x + lax.psum(partial_sum, "tp")  # BUG: expert_reduce_over_tp_only
    both = ("ep", "tp")
    if not cfg.shared_ffn:
        return x + lax.psum(partial_sum, both)
    shared = shared_expert(h, layer)  # partial over "tp", the same on every "ep" device
    if bug == "shared_expert_not_reduced":
        return x + lax.psum(partial_sum, both) + shared  # BUG: shared_expert_not_reduced
    if bug == "shared_expert_reduced_over_ep":
        return x + lax.psum(partial_sum + shared, both)  # BUG: shared_expert_reduced_over_ep
    return x + lax.psum(partial_sum, both) + lax.psum(shared, "tp")


def ep_decoder(params: Params, x: Array, *, cfg: MixtralConfig, bug: Bug | None = None) -> Array:
    """Per-device decoder stack: replicated hidden states in and out."""
    cos, sin = llama.rope_tables(x.shape[1], cfg)
    for layer in params["layers"]:
        x = llama.tp_attention(x, layer, cos, sin, cfg, None)
        x = ep_moe(x, layer, cfg, bug)
    return llama.rms_norm(x, params["final_norm"], cfg.rms_eps)
