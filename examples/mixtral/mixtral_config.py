"""Mixtral shapes: the published 8x7B and 8x22B configs and a tiny one for tests.

The attention fields have the names `examples/llama` reads, so its attention code serves
both models (Mixtral's attention is Llama's: GQA, RoPE, RMSNorm).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MixtralConfig:
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int  # per expert
    experts: int
    top_k: int
    vocab: int
    rope_theta: float = 1_000_000.0
    rms_eps: float = 1e-5
    # a shared expert every token goes through besides its routed ones (DeepSeek-MoE and
    # Qwen-MoE have one; Mixtral does not): its ffn size, 0 for none
    shared_ffn: int = 0
    # read by the Llama attention this model reuses (examples/llama/config.py has the meaning)
    rope_interleaved: bool = False
    heads_view: str = "none"


# What the published configs share: 8 experts, top-2 routing, 8 kv heads of 128 dims.
PUBLISHED_FAMILY = dict(kv_heads=8, head_dim=128, experts=8, top_k=2)
CONFIGS: dict[str, MixtralConfig] = {
    "tiny": MixtralConfig(
        layers=2, hidden=64, heads=8, kv_heads=4, head_dim=8, ffn=64, experts=4, top_k=2, vocab=256
    ),
    "8x7b": MixtralConfig(
        layers=32, hidden=4096, heads=32, ffn=14336, vocab=32000, **PUBLISHED_FAMILY
    ),
    "8x22b": MixtralConfig(
        layers=56, hidden=6144, heads=48, ffn=16384, vocab=32768, **PUBLISHED_FAMILY
    ),
}
