"""torchtitan's own models, built and parallelised as torchtitan does it, for the tests.

The models are torchtitan 0.3.0's, shrunk to two layers of width 64, random weights:
- `llama3`: `Llama3Model` (fused QKV, complex RoPE, GQA, torchtitan's own vocab-parallel
  embedding);
- `qwen3`: `Qwen3Model` (fused QKV, RMSNorm on q and k per head, cos/sin RoPE, the embedding
  tied to the output head), and `qwen3_moe`, its mixture of experts (a router, grouped
  experts, tokens combined by torchtitan's `deterministic_scatter_add` custom op).
The tensor-parallel plan is torchtitan's: `set_<family>_sharding_config` fills the sharding
of every sub-config (what the model config's `update_from_config` does in the trainer), and
`model.parallelize(parallel_dims)` applies it; a tied embedding is tied again after, as the
trainer's `init_states` does. Attention is torchtitan's `ScaledDotProductAttention` (its
default for language models is FlexAttention, which is `torch.compile`d and cannot be traced
with make_fx). The forward runs inside torchtitan's `get_spmd_context`, as the trainer runs
it.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import torch

SEQ, VOCAB, DIM = 8, 256, 64


def build(
    tp: int,
    *,
    family: str = "llama3",
    sp: bool = False,
    backend: str = "spmd_types",
    heads: int = 4,
    kv_heads: int = 2,
    fuse_qkv: bool = True,
    plan_edit: Callable[[Any], None] | None = None,
    fsdp: int = 1,
) -> tuple[torch.nn.Module, torch.nn.Module, Any, Callable[[], contextlib.AbstractContextManager]]:
    """(baseline, parallel model, device mesh, context to run the forward in).
    `plan_edit(config)` changes the plan after torchtitan filled it (a planted bug).
    `fsdp > 1` then wraps the model as torchtitan's graph trainer does
    (`apply_simple_fsdp`: SimpleFSDP's `data_parallel(..., "fully_shard")` on the fsdp mesh,
    in full precision; the graph trainer's backend is partial_dtensor); the mesh is then
    `fsdp x tp`."""
    import torchtitan.distributed.parallel_dims as parallel_dims_module
    import torchtitan.tools.utils as tools
    from torchtitan.config import ParallelismConfig
    from torchtitan.distributed import ParallelDims
    from torchtitan.distributed.utils import get_spmd_context, set_spmd_backend
    from torchtitan.models.common.attention import ScaledDotProductAttention

    from scalify.api import fake_mesh

    # torchtitan names the FSDP storage axis `dp_shard` under the spmd_types and full_dtensor
    # backends, `fsdp` under partial_dtensor (the graph trainer's)
    fsdp_axis = "dp_shard" if backend in ("spmd_types", "full_dtensor") else "fsdp"
    mesh = fake_mesh(f"{fsdp_axis}={fsdp},tp={tp}" if fsdp > 1 else f"tp={tp}")
    parallel_dims_module.device_type = tools.device_type = "cpu"  # it picks cuda otherwise
    configs = {
        "llama3": _llama3,
        "qwen3": _qwen3,
        "qwen3_moe": partial(_qwen3, moe=True),
        "deepseek_v3": _deepseek_v3,
    }
    config, set_sharding = configs[family](heads, kv_heads, fuse_qkv)
    for layer in config.layers:
        layer.attention.inner_attention = ScaledDotProductAttention.Config()
    set_sharding(config, enable_sp=sp)
    if plan_edit is not None:
        plan_edit(config)
    torch.manual_seed(0)
    model = config.build()
    with torch.no_grad():
        model.init_states(buffer_device=torch.device("cpu"))
    model.eval()
    baseline = copy.deepcopy(model)
    parallelism = ParallelismConfig(
        tensor_parallel_degree=tp,
        enable_sequence_parallel=sp,
        spmd_backend=backend,
        data_parallel_shard_degree=fsdp,
    )
    set_spmd_backend(backend)  # what the trainer does first
    parallel_dims = ParallelDims.from_config(parallelism, world_size=tp * fsdp)
    if tp > 1:
        model.parallelize(parallel_dims)
        if getattr(model, "enable_weight_tying", False):  # the trainer's init_states ties again
            model.tok_embeddings.weight = model.lm_head.weight
    if fsdp > 1:
        from torchtitan.experiments.graph_trainer.simple_fsdp import (
            MixedPrecisionPolicy,
            data_parallel,
        )

        full = MixedPrecisionPolicy(param_dtype=torch.float32, reduce_dtype=torch.float32)
        model = data_parallel(
            model, parallel_dims.get_mesh(fsdp_axis), "fully_shard", mp_policy=full
        )

    @contextlib.contextmanager
    def context() -> Iterator[None]:
        with get_spmd_context(parallel_dims=parallel_dims)():
            yield

    return baseline, model, mesh, context


def _llama3(heads: int, kv_heads: int, fuse_qkv: bool) -> tuple[Any, Callable]:
    """torchtitan's Llama3 config, and its sharding config's filler."""
    from torchtitan.models.common import (
        ComplexRoPE,
        Embedding,
        Linear,
        RMSNorm,
        compute_ffn_hidden_dim,
    )
    from torchtitan.models.llama3 import (
        _EMBEDDING_INIT,
        _NORM_INIT,
        Llama3Model,
        _build_llama3_layers,
        _output_linear_init,
    )
    from torchtitan.models.llama3.sharding import set_llama3_sharding_config

    dim = DIM
    config = Llama3Model.Config(
        dim=dim,
        vocab_size=VOCAB,
        tok_embeddings=Embedding.Config(
            num_embeddings=VOCAB, embedding_dim=dim, param_init=_EMBEDDING_INIT
        ),
        norm=RMSNorm.Config(normalized_shape=dim, param_init=_NORM_INIT),
        lm_head=Linear.Config(
            in_features=dim, out_features=VOCAB, param_init=_output_linear_init(dim)
        ),
        layers=_build_llama3_layers(
            fuse_qkv=fuse_qkv,
            n_layers=2,
            dim=dim,
            n_heads=heads,
            n_kv_heads=kv_heads,
            hidden_dim=compute_ffn_hidden_dim(dim, multiple_of=64),
            rope=ComplexRoPE.Config(
                dim=dim // heads, max_seq_len=64, theta=500000, scaling="llama"
            ),
            attn_backend="flex",
        ),
    )
    return config, set_llama3_sharding_config


def _qwen3(heads: int, kv_heads: int, fuse_qkv: bool, moe: bool = False) -> tuple[Any, Callable]:
    """torchtitan's Qwen3 config (its MoE variant with `moe`: 4 experts, 2 per token), and
    its sharding config's filler (expert parallelism off)."""
    import torchtitan.models.qwen3 as qwen3
    from torchtitan.models.common import CosSinRoPE, Embedding, Linear
    from torchtitan.models.qwen3.sharding import set_qwen3_sharding_config

    head_dim = DIM // heads
    shape = dict(n_layers=2, dim=DIM, n_heads=heads, n_kv_heads=kv_heads, head_dim=head_dim)
    rope = CosSinRoPE.Config(dim=head_dim, max_seq_len=64, theta=1e6)
    common = dict(fuse_qkv=fuse_qkv, attn_backend="flex", rope=rope, **shape)
    if moe:
        layers = qwen3._build_qwen3_moe_layers(
            moe_hidden_dim=32, num_experts=4, top_k=2, moe_comm_backend="standard", **common
        )
    else:
        layers = qwen3._build_qwen3_layers(hidden_dim=2 * DIM, **common)
    config = qwen3.Qwen3Model.Config(
        vocab_size=VOCAB,
        dim=DIM,
        norm=qwen3._qwen3_norm(DIM),
        enable_weight_tying=True,
        tok_embeddings=Embedding.Config(
            num_embeddings=VOCAB, embedding_dim=DIM, param_init=qwen3._EMBEDDING_INIT
        ),
        lm_head=Linear.Config(in_features=DIM, out_features=VOCAB, param_init=qwen3._LINEAR_INIT),
        layers=layers,
    )
    return config, partial(set_qwen3_sharding_config, enable_ep=False)


def _deepseek_v3(heads: int, kv_heads: int, fuse_qkv: bool) -> tuple[Any, Callable]:
    """torchtitan's DeepSeek-V3 config (multi-head latent attention, a dense first layer,
    then a mixture of 4 experts, 2 per token, with a shared expert), and its sharding
    config's filler (expert parallelism off). `kv_heads` and `fuse_qkv` do not apply."""
    import torchtitan.models.deepseek_v3 as dsv3
    from torchtitan.models.common import ComplexRoPE, Embedding, Linear, RMSNorm
    from torchtitan.models.deepseek_v3.sharding import set_deepseek_v3_sharding_config

    rope_dim = 8
    layers = dsv3._build_dsv3_layers(
        n_layers=2,
        n_dense_layers=1,
        dim=DIM,
        n_heads=heads,
        q_lora_rank=0,
        kv_lora_rank=32,
        qk_nope_head_dim=16,
        qk_rope_head_dim=rope_dim,
        v_head_dim=16,
        mscale=0.70,
        dense_hidden_dim=2 * DIM,
        moe_hidden_dim=32,
        num_experts=4,
        num_shared_experts=1,
        router_top_k=2,
        router_score_func="softmax",
        attn_backend="flex",
        moe_comm_backend="standard",
        non_blocking_capacity_factor=None,
        rope=ComplexRoPE.Config(dim=rope_dim, max_seq_len=64, theta=10000.0),
    )
    config = dsv3.DeepSeekV3Model.Config(
        vocab_size=VOCAB,
        dim=DIM,
        tok_embeddings=Embedding.Config(
            num_embeddings=VOCAB, embedding_dim=DIM, param_init=dsv3._EMBEDDING_INIT
        ),
        norm=RMSNorm.Config(normalized_shape=DIM, param_init=dsv3._NORM_INIT),
        lm_head=Linear.Config(
            in_features=DIM, out_features=VOCAB, param_init=dsv3._output_linear_init(DIM)
        ),
        layers=layers,
    )
    return config, partial(set_deepseek_v3_sharding_config, enable_ep=False)


def tokens() -> torch.Tensor:
    return torch.randint(0, VOCAB, (2, SEQ), generator=torch.Generator().manual_seed(1))
