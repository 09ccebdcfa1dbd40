"""Padding for a degree that divides neither the heads nor the widths (tp 6 on Llama-3.1).

A checkpoint converter (transformers-neuronx, Megatron's vocabulary padding) lays the
weights out for such a degree before the model runs: q heads padded with zero heads to a
multiple of tp, each KV head repeated for the q heads it serves and padded alike (so q head
i reads local KV head i on every device), the MLP width and the vocabulary padded with zero
columns (and the matching rows of the down projection and the embedding). The
tensor-parallel body then runs unchanged on the padded shapes; only the cross-entropy must
keep the padded logits out of its softmax.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from config import LlamaConfig


def round_up(n: int, tp: int) -> int:
    return -(-n // tp) * tp


def needs_padding(cfg: LlamaConfig, tp: int) -> bool:
    """Whether tp divides neither way into a size the tensor-parallel body splits."""
    kv_fits = cfg.kv_heads % tp == 0 or tp % cfg.kv_heads == 0
    return any(n % tp for n in (cfg.heads, cfg.ffn, cfg.vocab)) or not kv_fits


def padded_config(cfg: LlamaConfig, tp: int) -> LlamaConfig:
    """The config of the padded weights the tensor-parallel body runs on (cfg itself when
    tp divides every split size). `vocab_unpadded` keeps the true vocabulary for the loss."""
    if not needs_padding(cfg, tp):
        return cfg
    heads = round_up(cfg.heads, tp)
    return dataclasses.replace(
        cfg,
        heads=heads,
        kv_heads=heads,  # one KV head per q head, repeated by the converter
        ffn=round_up(cfg.ffn, tp),
        vocab=round_up(cfg.vocab, tp),
        vocab_unpadded=cfg.vocab,
    )


def _pad(w: np.ndarray, axis: int, size: int) -> np.ndarray:
    """w with zeros appended along `axis` up to `size`."""
    widths = [(0, 0)] * w.ndim
    widths[axis] = (0, size - w.shape[axis])
    return np.pad(w, widths)


def _kv_per_q_head(w: np.ndarray, cfg: LlamaConfig, padded: LlamaConfig) -> np.ndarray:
    """wk/wv columns with each KV head repeated for its group of q heads, then padded."""
    rows = w.shape[0]
    heads = w.reshape(rows, cfg.kv_heads, cfg.head_dim)
    repeated = np.repeat(heads, cfg.heads // cfg.kv_heads, axis=1).reshape(rows, -1)
    return _pad(repeated, 1, padded.kv_heads * cfg.head_dim)


def pad_params(params: dict, cfg: LlamaConfig, tp: int) -> dict:
    """The converter: the baseline's weights laid out for tp (the same tree when no size
    needs padding). Padding holds zeros, so padded heads and columns add nothing."""
    padded = padded_config(cfg, tp)
    if padded is cfg:
        return params
    q_width, ffn = padded.heads * cfg.head_dim, padded.ffn

    def layer(w: dict) -> dict:
        out = dict(w)
        out["wq"] = _pad(w["wq"], 1, q_width)
        out["wk"], out["wv"] = (_kv_per_q_head(w[n], cfg, padded) for n in ("wk", "wv"))
        out["wo"] = _pad(w["wo"], 0, q_width)
        out["w_gate"], out["w_up"] = _pad(w["w_gate"], 1, ffn), _pad(w["w_up"], 1, ffn)
        out["w_down"] = _pad(w["w_down"], 0, ffn)
        return out

    out = dict(params, layers=[layer(w) for w in params["layers"]])
    if "embed" in params:
        out["embed"] = _pad(params["embed"], 0, padded.vocab)
        out["lm_head"] = _pad(params["lm_head"], 1, padded.vocab)
    return out
