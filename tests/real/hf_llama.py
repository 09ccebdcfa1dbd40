"""transformers' LlamaForCausalLM, tiny and random, saved as a checkpoint and loaded tensor
parallel the way its users load it, for the tests and the benchmark (no download)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

VOCAB = 256


def save_tiny_llama(folder: Path) -> Path:
    """A random 2-layer Llama of width 64 saved at `folder`."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=VOCAB,
        max_position_embeddings=64,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(folder)
    return folder


def load(checkpoint: Path, tp: int = 2, **distributed: Any) -> tuple[Any, Any, Any]:
    """(baseline, the same checkpoint loaded with `DistributedConfig(tp_size=tp, ...)`,
    the device mesh of the fake job it runs in)."""
    from transformers import LlamaForCausalLM
    from transformers.distributed import DistributedConfig

    from scalify.api import fake_mesh

    mesh = fake_mesh(f"tp={tp}")
    baseline = LlamaForCausalLM.from_pretrained(checkpoint).eval()
    model = LlamaForCausalLM.from_pretrained(
        checkpoint, distributed_config=DistributedConfig(tp_size=tp, **distributed)
    ).eval()
    return baseline, model, mesh


def token_ids() -> torch.Tensor:
    return torch.randint(0, VOCAB, (2, 8), generator=torch.Generator().manual_seed(1))
