"""transformers' LlamaForCausalLM and MixtralForCausalLM, tiny and random, saved as
checkpoints and loaded tensor parallel the way their users load them, for the tests and the
benchmark (no download)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

VOCAB = 256


def save_tiny_llama(folder: Path) -> Path:
    """A random 2-layer Llama of width 64 saved at `folder`."""
    return save_tiny(folder, "Llama")


def save_tiny_mixtral(folder: Path, kv_heads: int = 2) -> Path:
    """A random 1-layer Mixtral of width 64 with 4 experts, 2 per token, saved at `folder`."""
    return save_tiny(
        folder,
        "Mixtral",
        num_hidden_layers=1,
        num_key_value_heads=kv_heads,
        num_local_experts=4,
        num_experts_per_tok=2,
    )


# Decoder families of transformers with their own TP plans, each with what sets it apart
ARCHITECTURES: dict[str, dict[str, Any]] = {
    "Qwen2": {},  # biases on q, k and v (column-parallel biases)
    "Qwen3": {"head_dim": 16},  # RMSNorm over each head of q and k
    "Gemma2": {"head_dim": 16},  # logit soft-capping, sliding-window layers, scaled embedding
    "Olmo2": {},  # q/k gathered (`colwise_gather_output`), normed over all heads, re-split
    "Starcoder2": {},  # LayerNorm, biases on the row-parallel projections
    "Phi": {},  # partial rotary, a parallel attention/MLP block, dense biases
    "Cohere": {},  # a parallel block, LayerNorm without bias, interleaved rotary
    "Phi3": {"pad_token_id": 0},  # fused [q|k|v] and [gate|up] projections
    # linear attention beside softmax attention: the gated delta rule's chunked scan, whose
    # output is written one chunk at a time into a zeros tensor (`out[:, :, i] = ...`)
    "OlmoHybrid": {"pad_token_id": 0},
    # Mamba-2 mixers (the chunked selective scan, a causal depthwise conv) before attention
    "Bamba": {"attn_layer_indices": [1], "pad_token_id": 0},
    # a Mamba-2 mixer, then attention, each followed by experts and a shared expert
    "GraniteMoeHybrid": {
        "layer_types": ["mamba", "attention"],
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "pad_token_id": 0,
    },
    # a Mamba mixer, then attention with experts
    "Jamba": {
        "attn_layer_offset": 1,
        "attn_layer_period": 2,
        "expert_layer_offset": 1,
        "expert_layer_period": 2,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "pad_token_id": 0,
    },
}

# Latent attention (MLA) with the heads split by each family's own plan: the rope key, one
# per token, expanded to each device's heads; RoPE by `torch.polar` (an empty complex tensor
# filled through its real view) in DeepSeek-V2 and Llama 4
MLA = {"kv_lora_rank": 16, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "v_head_dim": 16}
SPLIT_HEAD_ARCHITECTURES: dict[str, dict[str, Any]] = {
    "MiniCPM3": {**MLA, "q_lora_rank": 32, "head_dim": 16},
    "DeepseekV2": {  # latent attention and experts, with a shared one
        **MLA,
        "q_lora_rank": None,
        "n_routed_experts": 4,
        "n_shared_experts": 1,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 32,
        "first_k_dense_replace": 1,
        "n_group": 1,
        "topk_group": 1,
        "head_dim": 16,
    },
    "Llama4Text": {  # chunked attention, no-rope layers, experts
        "head_dim": 16,
        "intermediate_size_mlp": 128,
        "num_local_experts": 4,
        "num_experts_per_tok": 1,
        "moe_layers": [1],
        "no_rope_layers": [1, 0],
        "layer_types": ["chunked_attention", "full_attention"],
        "attention_chunk_size": 4,
    },
    # linear attention (gated delta rule) beside softmax attention, experts with a shared one
    "Qwen3Next": {
        "head_dim": 16,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 32,
        "shared_expert_intermediate_size": 64,
        "linear_key_head_dim": 16,
        "linear_value_head_dim": 16,
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 4,
        "layer_types": ["linear_attention", "full_attention"],
    },
}
MODEL_CLASSES = {"Llama4Text": "Llama4ForCausalLM"}

# Mixture-of-experts families, run with their default experts (`grouped_mm`: tokens sorted by
# expert, one grouped matmul per projection, the sort inverted by a scatter)
MOE_ARCHITECTURES: dict[str, dict[str, Any]] = {
    "Qwen3Moe": {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32},
    "Qwen2Moe": {  # a shared expert beside the routed ones
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 32,
        "shared_expert_intermediate_size": 64,
    },
    "DeepseekV3": {  # latent attention (its key states copied into `new_empty` in parts)
        "n_routed_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 32,
        "q_lora_rank": None,
        "kv_lora_rank": 16,
        "qk_rope_head_dim": 8,
        "qk_nope_head_dim": 8,
        "v_head_dim": 16,
        "first_k_dense_replace": 1,  # one dense layer, one with experts
        "n_group": 1,
        "topk_group": 1,
    },
    "GptOss": {  # biased experts, a clamped gated activation, attention sinks
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "head_dim": 16,
        "layer_types": ["sliding_attention", "full_attention"],
    },
}


# What every tiny checkpoint shares; a family's own fields and the caller's override it
TINY: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": VOCAB,
    "max_position_embeddings": 64,
    "tie_word_embeddings": False,
}


def save_tiny(folder: Path, architecture: str, **fields: Any) -> Path:
    """A random 2-layer `architecture`ForCausalLM of width 64 saved at `folder`; `fields`
    override its config's (the family's own included)."""
    import transformers

    family = {**ARCHITECTURES, **MOE_ARCHITECTURES, **SPLIT_HEAD_ARCHITECTURES}.get(
        architecture, {}
    )
    config = getattr(transformers, f"{architecture}Config")(**{**TINY, **family, **fields})
    torch.manual_seed(0)
    getattr(transformers, model_class(architecture))(config).save_pretrained(folder)
    return folder


def model_class(architecture: str) -> str:
    """The causal-LM class of a family (Llama 4's text model is `Llama4ForCausalLM`)."""
    return MODEL_CLASSES.get(architecture, f"{architecture}ForCausalLM")


def load(
    checkpoint: Path,
    tp: int = 2,
    model_class: str = "LlamaForCausalLM",
    options: dict[str, Any] | None = None,
    **distributed: Any,
) -> tuple[Any, Any, Any]:
    """(baseline, the same checkpoint loaded with `DistributedConfig(tp_size=tp, ...)`,
    the device mesh of the fake job it runs in); `options` go to both `from_pretrained`."""
    import transformers
    from transformers.distributed import DistributedConfig

    from scalify.api import fake_mesh

    cls = getattr(transformers, model_class)
    mesh = fake_mesh(f"tp={tp}")
    baseline = cls.from_pretrained(checkpoint, **(options or {})).eval()
    model = cls.from_pretrained(
        checkpoint,
        distributed_config=DistributedConfig(tp_size=tp, **distributed),
        **(options or {}),
    ).eval()
    return baseline, model, mesh


def token_ids() -> torch.Tensor:
    return torch.randint(0, VOCAB, (2, 8), generator=torch.Generator().manual_seed(1))


def train_step(model: torch.nn.Module, loss_of):
    """`loss_of(model, *inputs)` and the gradient of every weight, as a training loop's
    `loss.backward()` leaves them in `.grad`."""
    weights = [p for p in model.parameters() if p.requires_grad]

    def step(*inputs):
        loss = loss_of(model, *inputs)
        loss.backward()
        return loss, [p.grad for p in weights]

    return step


def optimizer_step(model: torch.nn.Module, loss_of, clip: str = ""):
    """One training step as a loop writes it: the loss, `backward()`, the gradients clipped
    to norm 1 by hand when `clip` says how (torch's `clip_grad_norm_` refuses transformers'
    mix of DTensor and plain gradients), and `torch.optim.AdamW.step()`; returns the loss
    and the updated weights. `clip="whole"` takes each gradient's norm over the whole
    tensor (`full_tensor()` of a DTensor); `clip="local"` over this device's shard, the
    classic mistake of a hand-written clip (on one device the two are the same)."""
    weights = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(weights, lr=1e-3)

    def step(*inputs):
        loss = loss_of(model, *inputs)
        loss.backward()
        if clip:
            grads = [_piece(p.grad, clip) for p in weights]
            norm = torch.sqrt(sum((g * g).sum() for g in grads))
            for p in weights:
                p.grad.mul_(torch.clamp(1.0 / (norm + 1e-6), max=1.0))
        optimizer.step()
        return loss, weights

    return step


def _piece(tensor: torch.Tensor, clip: str) -> torch.Tensor:
    """The part of a gradient a clip's norm reads: all of a DTensor, or its local shard."""
    if not hasattr(tensor, "to_local"):
        return tensor
    return tensor.full_tensor() if clip == "whole" else tensor.to_local()


def causal_lm_loss(model: Any, input_ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return model(input_ids, labels=labels).loss


def check_training_step(baseline: Any, model: Any, mesh: Any) -> Any:
    """Scalify's report on one causal-LM training step (loss and every gradient) of `model`
    against `baseline`, on the test tokens and labels."""
    from scalify.api import check_equivalent

    labels = torch.randint(0, VOCAB, (2, 8), generator=torch.Generator().manual_seed(3))
    return check_equivalent(
        train_step(baseline, causal_lm_loss),
        train_step(model, causal_lm_loss),
        mesh=mesh,
        example_inputs=(token_ids(), labels),
    )
