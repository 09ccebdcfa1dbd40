"""Megatron-core's own tensor-parallel layers on the CPU, verified by Scalify: the same
layers built at tensor-parallel size 1 (the baseline) and N, each traced in its own
process-group state, and the report written as JSON.

    python tests/real/megatron_parts.py REPORT.json --part mlp|embedding|layer --tp 2
        [--sequence-parallel]
        [--grad] [--bug NAME]

Megatron's layers run with a fake process group (`torch.distributed`'s `fake` backend: its
collectives return their input, only the graph's shapes and ops matter), and
`use_cpu_initialization`. Each part is traced the way a user calls it, with its weights as
the module's own parameters.
"""

from __future__ import annotations

import argparse
import json
import warnings
from pathlib import Path

import torch
import torch.distributed as dist

SEQ, BATCH, HIDDEN, FFN, VOCAB = 8, 2, 16, 32, 64


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--part", choices=sorted(_PARTS), default="mlp")
    parser.add_argument("--tp", type=int, default=2)
    parser.add_argument("--sequence-parallel", action="store_true")
    parser.add_argument("--grad", action="store_true", help="forward and backward")
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--loss", action="store_true", help="gpt: the loss of given labels")
    parser.add_argument(
        "--query-groups", type=int, default=0, help="KV groups of grouped-query attention"
    )
    parser.add_argument("--bug", default="")
    parser.add_argument(
        "--outputs", default="", help="layouts of the outputs, `;`-separated (empty: inferred)"
    )
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    _cpu_buffers()
    from scalify.compiler.compile import compile_rule_dir

    from scalify.cli import default_rules_dir
    from scalify.mesh import parse_mesh
    from scalify.relations import RelationsFile
    from scalify.verify import verify_graphs

    baseline, parallel = _graph_at(1, args), _graph_at(args.tp, args)
    rules = compile_rule_dir(default_rules_dir())
    stated = [layout or None for layout in args.outputs.split(";")] if args.outputs else None
    # a layer on sequence shards returns sequence shards: unstated outputs take the layout
    # their shapes give, as inputs do
    given = RelationsFile("<megatron_parts>", None, {}, stated, infer_outputs=True)
    report = verify_graphs(baseline, parallel, rules, parse_mesh(f"tp={args.tp}"), given)
    result = report.to_dict()
    # each graph's segments as partitioning cuts it (a training step: pass by pass)
    result["segments"] = {
        side: _segment_sizes(graph) for side, graph in (("baseline", baseline), ("tp", parallel))
    }
    args.out.write_text(json.dumps(result))


def _segment_sizes(graph) -> list[int]:
    from scalify.engine.partition import cut_points, in_pass_order, segments

    ordered = in_pass_order(graph)
    return [len(s.nodes) for s in segments(ordered, cut_points(ordered))]


def _cpu_buffers() -> None:
    """Megatron takes the scratch buffers of sequence parallelism's all-gathers from
    `torch.cuda.current_device()`; on a machine without CUDA they live on the CPU. Its
    attention forks a CUDA random generator around dropout (here of probability 0), which a
    machine without CUDA does not have: the fork is a no-op. Neither changes what the model
    computes."""
    import contextlib

    from megatron.core.tensor_parallel import random

    torch.cuda.current_device = lambda: "cpu"
    random.CudaRNGStatesTracker.fork = lambda self, *args, **kwargs: contextlib.nullcontext()


def _graph_at(tp: int, args):
    """The part built and traced at tensor-parallel size `tp` (rank 0's program)."""
    from megatron.core import parallel_state
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from scalify.canon.canonicalize import canonicalize
    from scalify.capture import trace_per_device
    from scalify.capture.fx_trace import trace
    from scalify.frontends.fx import graph_from_fx

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=tp)
    parallel_state.initialize_model_parallel(
        tensor_model_parallel_size=tp, create_gloo_process_groups=False
    )

    def make():
        parallel_state.destroy_global_memory_buffer()  # a cached buffer of the last trace
        parallel_state._set_global_memory_buffer()
        torch.manual_seed(0)
        step, inputs = _PARTS[args.part](tp, args)
        return trace(step, inputs)

    try:
        # Megatron reads the rank when it builds a layer (a vocabulary range, say): each
        # device's program is built and traced as that device
        gm = trace_per_device(make, (tp,)) if tp > 1 else make()
        graph = canonicalize(graph_from_fx(gm, f"{args.part}@tp{tp}", world_size=tp))
        graph.output_inputs = dict(gm.meta.get("output_inputs", {}))
        return graph
    finally:
        parallel_state.destroy_model_parallel()
        dist.destroy_process_group()


def _config(tp: int, args):
    from megatron.core.transformer import TransformerConfig

    return TransformerConfig(
        num_layers=1,
        hidden_size=HIDDEN,
        ffn_hidden_size=FFN,
        num_attention_heads=getattr(args, "heads", 4),
        num_query_groups=getattr(args, "query_groups", 0) or None,
        use_cpu_initialization=True,
        tensor_model_parallel_size=tp,
        sequence_parallel=args.sequence_parallel and tp > 1,
    )


def _mlp(tp: int, args):
    """ColumnParallelLinear -> gelu -> RowParallelLinear, as Megatron's MLP wires them."""
    from megatron.core.tensor_parallel import ColumnParallelLinear, RowParallelLinear

    config = _config(tp, args)
    init = torch.nn.init.xavier_normal_
    bug = args.bug if tp > 1 else ""
    model = torch.nn.Module()
    model.fc1 = ColumnParallelLinear(
        HIDDEN, FFN, config=config, init_method=init, bias=True, gather_output=False
    )
    model.fc2 = RowParallelLinear(
        FFN,
        HIDDEN,
        config=config,
        init_method=init,
        bias=True,
        input_is_parallel=True,
        # an expert's projection leaves its reduction to the expert dispatcher, and its bias
        # to the caller
        is_expert=bug == "row_parallel_as_expert",
        skip_bias_add=bug == "row_parallel_as_expert",
    )
    weights = list(model.parameters())

    def step(x):
        h, _ = model.fc1(x)
        y, bias = model.fc2(torch.nn.functional.gelu(h))
        if bias is not None:  # skip_bias_add: the caller adds it (Megatron fuses it later)
            y = y + bias
        if not args.grad:
            return y
        y.square().sum().backward()
        return y, [w.grad for w in weights]

    seq = SEQ // tp if config.sequence_parallel else SEQ
    return step, (torch.randn(seq, BATCH, HIDDEN),)


def _embedding(tp: int, args):
    """VocabParallelEmbedding: each device looks up its block of the vocabulary."""
    from megatron.core.tensor_parallel import VocabParallelEmbedding

    config = _config(tp, args)
    table = VocabParallelEmbedding(
        VOCAB, HIDDEN, init_method=torch.nn.init.xavier_normal_, config=config
    )

    def step(tokens):
        return table(tokens)

    return step, (torch.randint(0, VOCAB, (BATCH, SEQ)),)


def _layer(tp: int, args):
    """Megatron's own `TransformerLayer` with its local (non Transformer Engine) GPT spec:
    LayerNorm, self-attention (fused QKV column-parallel projection, `DotProductAttention`'s
    `baddbmm` over batch and heads merged into one dim, a row-parallel output projection),
    the MLP, both residuals; 4 heads, dropout 0, the causal mask given (its default mask is
    made on the CUDA device)."""
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.transformer_layer import TransformerLayer

    config = _config(tp, args)
    config.hidden_dropout = config.attention_dropout = 0.0
    layer = TransformerLayer(config, get_gpt_layer_local_spec().submodules, layer_number=1)
    if args.bug == "attention_projection_as_expert" and tp > 1:
        layer.self_attention.linear_proj.explicit_expert_comm = True  # its all-reduce skipped
    mask = torch.triu(torch.ones(SEQ, SEQ), diagonal=1).bool()[None, None]

    def step(x):
        output, _ = layer(x, attention_mask=mask)
        return output

    return step, (torch.randn(SEQ, BATCH, HIDDEN),)


def _gpt(tp: int, args):
    """Megatron's own `GPTModel` (local spec, RoPE, 2 layers): embedding, decoder, final
    norm and the output layer, logits left split over the vocabulary (its default
    `parallel_output`)."""
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec

    config = _config(tp, args)
    config.num_layers = 2
    config.hidden_dropout = config.attention_dropout = 0.0
    model = GPTModel(
        config,
        get_gpt_layer_local_spec(),
        vocab_size=VOCAB,
        max_sequence_length=SEQ,
        position_embedding_type="rope",
    )
    if args.bug == "qkv_grad_not_reduced" and tp > 1:
        # the first layer's QKV projection built as if another module reduced its input's
        # gradient (`disable_grad_reduce`): the forward is unchanged, the backward is not
        qkv = model.decoder.layers[0].self_attention.linear_qkv
        qkv.disable_grad_reduce, qkv.allreduce_dgrad = True, False
    mask = torch.triu(torch.ones(SEQ, SEQ), diagonal=1).bool()[None, None]
    positions = torch.arange(SEQ)[None].expand(BATCH, SEQ)
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(1))
    if not args.loss:
        return (lambda tokens: model(tokens, positions, mask)), (tokens,)

    weights = list(model.parameters())

    def step(tokens, labels):  # each token's loss, Megatron's vocab-parallel cross-entropy
        loss = model(tokens, positions, mask, labels=labels)
        if not args.grad:
            return loss
        loss.sum().backward()  # a training step's backward; each weight's gradient
        return loss, [w.grad for w in weights]

    return step, (tokens, torch.randint(0, VOCAB, (BATCH, SEQ)))


_PARTS = {"mlp": _mlp, "embedding": _embedding, "layer": _layer, "gpt": _gpt}


if __name__ == "__main__":
    main()
