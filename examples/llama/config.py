"""Llama-3.1 shapes: the published 8B/70B/405B configs and a tiny one for tests.

Only the shapes the forward pass needs; Llama-3.1's RoPE frequency scaling (factor 8) is
left out, so `rope_theta` alone sets the rotary frequencies.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True)
class LlamaConfig:
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    rope_theta: float = 500_000.0
    rms_eps: float = 1e-5
    # Fused projections: one [Q|K|V] weight and one [gate|up] weight per layer, each split
    # after its matmul (`--fused` in export.py); the tensor-parallel body cuts every part.
    fused: bool = False
    # How each device cuts its [gate_i|up_i] from the whole fused weight: slices of each part
    # ("parts"), or one block of the weight re-laid out by a reshape-transpose-reshape that
    # puts every device's columns of the two parts side by side ("relaid", `--fused-cut`).
    fused_cut: str = "parts"
    # RoPE pairing: rotate-half (dims i, i + head_dim/2; Hugging Face) by default, or
    # interleaved (dims 2i, 2i+1; Meta's complex form) with `--rope interleaved`.
    rope_interleaved: bool = False
    # QK-norm (`--qk-norm`, OLMo-2 style): an RMSNorm over all q heads and over all k heads
    # after the projections, so under tensor parallelism its statistic spans the devices.
    qk_norm: bool = False
    # Embedding and target logit by one-hot contractions instead of gathers (`--lookup
    # one_hot`, as T5X/Flax write them for TPUs).
    one_hot_lookup: bool = False
    # One side projects q/k/v straight into heads with the weights viewed as (hidden, heads,
    # head_dim) (`--heads-view tp|baseline`, Flax DenseGeneral style) while the other keeps
    # matmul-then-reshape, so the two are written differently.
    heads_view: str = "none"
    # Set on the padded config of a degree that divides no size (`padding.padded_config`):
    # the true vocabulary, whose padded logits the vocab-parallel loss keeps out of its sum.
    vocab_unpadded: int | None = None


CONFIGS: dict[str, LlamaConfig] = {
    # tiny: at tp 2 and 4 every device holds >= 2 q heads and >= 2 kv heads, so no
    # sharded dim has local size 1 (JAX would squeeze it out of the per-device HLO).
    "tiny": LlamaConfig(layers=2, hidden=128, heads=16, kv_heads=8, head_dim=8, ffn=256, vocab=512),
    "8b": LlamaConfig(
        layers=32, hidden=4096, heads=32, kv_heads=8, head_dim=128, ffn=14336, vocab=128256
    ),
    "70b": LlamaConfig(
        layers=80, hidden=8192, heads=64, kv_heads=8, head_dim=128, ffn=28672, vocab=128256
    ),
    "405b": LlamaConfig(
        layers=126, hidden=16384, heads=128, kv_heads=8, head_dim=128, ffn=53248, vocab=128256
    ),
}


def add_variant_options(ap: argparse.ArgumentParser) -> None:
    """The command-line options that pick a model variant (export.py and check.py)."""
    ap.add_argument("--config", choices=sorted(CONFIGS), default="tiny")
    ap.add_argument("--layers", type=int, help="override the config's layer count")
    ap.add_argument("--heads", type=int, help="override the config's q head count")
    ap.add_argument("--kv-heads", type=int, help="override the config's KV head count")
    ap.add_argument(
        "--fused",
        action="store_true",
        help="fused [Q|K|V] and [gate|up] weights, cut per part on each device",
    )
    ap.add_argument(
        "--fused-cut",
        choices=("parts", "relaid"),
        default="parts",
        help="with --fused: cut [gate|up] per part, or as one block of the re-laid-out weight",
    )
    ap.add_argument("--rope", choices=("half", "interleaved"), default="half")
    ap.add_argument("--qk-norm", action="store_true", help="RMSNorm over all q and k heads")
    ap.add_argument("--lookup", choices=("gather", "one_hot"), default="gather")
    ap.add_argument(
        "--heads-view",
        choices=("none", "tp", "baseline"),
        default="none",
        help="the side that projects straight into heads (weights viewed as hidden x heads x dim)",
    )


def config_from(args: argparse.Namespace) -> LlamaConfig:
    """The config the variant options describe."""
    cfg = CONFIGS[args.config]
    for name in ("layers", "heads", "kv_heads"):
        if getattr(args, name, None) is not None:
            cfg = dataclasses.replace(cfg, **{name: getattr(args, name)})
    return dataclasses.replace(
        cfg,
        fused=args.fused,
        fused_cut=args.fused_cut,
        rope_interleaved=args.rope == "interleaved",
        qk_norm=args.qk_norm,
        one_hot_lookup=args.lookup == "one_hot",
        heads_view=args.heads_view,
    )
