"""Export the Llama example as HLO text: the baseline and each tensor-parallel variant.

Usage: python examples/llama/export.py --out DIR [--config tiny|8b|70b|405b] [--tp 4]
       [--parts full|layers] [--layers N] [--seq 8] [--batch 2] [--bugs all|none|name,...]
       [--fused]

--parts full (default) exports the whole model: (params, tokens, targets) -> loss.
--parts layers exports the decoder stack alone: (params, x) -> hidden states, x of shape
(batch, seq, hidden) replicated, through every layer and the final RMSNorm; no embedding,
LM head or loss, hence no device index and no gather. --parts sp_layers is the same stack
with Megatron sequence parallelism: x and the result split along the sequence.
--parts train_layers is a training step over the decoder stack: (params, x) -> (loss, the
gradient of every weight), `jax.value_and_grad` of the sum of squared hidden states, the
tp variant inside `shard_map` with JAX's replication check on (so `psum` transposes right).
--parts train_step [--dp N] is a whole optimizer step: (params, m, v, x) -> (loss, params,
m, v) after one AdamW update, the distributed variant on a (dp, tp) mesh with the batch
split over dp.

Arguments are ShapeDtypeStructs (with a NamedSharding for the tp variants), so even the
405B config lowers without allocating a weight. The CLI sets XLA_FLAGS before jax is
imported, because the host-platform device count is fixed at backend start-up;
`export_all` imports jax lazily, so a caller that imports this module must have set
XLA_FLAGS itself (tests use the CLI).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
for folder in (HERE, HERE.parent):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

from config import LlamaConfig, add_variant_options, config_from  # noqa: E402
from hlo_export import set_device_count, write_hlo  # noqa: E402


def check_divisible(cfg: LlamaConfig, tp: int) -> None:
    """The splits tp_llama assumes: heads, ffn and vocab by tp; kv heads by or into tp.
    Where tp divides none of them the weights are padded (`padding.py`), which the fused
    weights, the QK-norm and the one-hot lookup do not support."""
    from padding import needs_padding

    bad = []
    if (cfg.fused or cfg.qk_norm) and cfg.kv_heads < tp:
        bad.append("kv_heads (--fused and --qk-norm need kv_heads >= tp)")
    if needs_padding(cfg, tp) and (cfg.fused or cfg.qk_norm or cfg.one_hot_lookup):
        bad.append("heads or widths (--fused, --qk-norm and --lookup one_hot need no padding)")
    if bad:
        raise ValueError(f"tp={tp} does not split {', '.join(bad)} of {cfg}")


def skip_reason(bug: str, cfg: LlamaConfig, tp: int, part: str = "full") -> str | None:
    """Why a bug variant computes exactly the correct result here, or None.

    Either its line is not on this path (the embedding/loss with part="layers", the
    kv-head slicing when wk/wv are sharded by in_specs) or it is a no-op at this tp.
    Such a variant is not exported: there is nothing for the verifier to find.
    """
    from model import FUSED_BUGS, SP_BUGS, kv_sharded
    from padding import padded_config

    cfg = padded_config(cfg, tp)  # the shapes the tensor-parallel body runs on
    local_heads = cfg.heads // tp
    if bug in FUSED_BUGS and not cfg.fused:
        return "the fused-weight bugs need --fused"
    if bug == "relaid_wrong_order" and cfg.fused_cut != "relaid":
        return "relaid_wrong_order needs --fused-cut relaid"
    if bug == "fused_gate_up_one_block" and cfg.fused_cut == "relaid":
        return "with --fused-cut relaid, [gate|up] is cut by relaid(), not per part"
    if bug == "qk_norm_local_heads" and not cfg.qk_norm:
        return "qk_norm_local_heads needs --qk-norm"
    if (part == "sp_layers") != (bug == "sp_slice_not_scatter") and (
        part != "sp_layers" or bug not in SP_BUGS
    ):
        return f"{bug}'s line is not on the {part} path"
    if bug == "vocab_ce_on_gathered_logits" and part == "layers":
        return "--parts layers has no embedding, LM head or loss"
    if bug == "padded_logits_in_softmax" and not cfg.vocab_unpadded:
        return f"tp={tp} divides the vocabulary: there is no padding to mask"
    if bug == "padded_logits_in_softmax" and part != "full":
        return f"{bug}'s line is not on the {part} path"
    if bug == "vocab_ce_on_gathered_logits" and cfg.vocab_unpadded:
        return "the padding mask keeps every copy but device 0's out of the gathered loss"
    if tp == 1:
        return "tp=1 has nothing to split"
    if bug == "kv_heads_wrong_split" and kv_sharded(cfg, tp):
        return (
            f"kv_heads={cfg.kv_heads} >= tp={tp}: wk/wv are split by in_specs, "
            "there is no kv start to get wrong"
        )
    if bug in ("heads_reshape_wrong_factor", "wrong_transpose") and local_heads == 1:
        return f"one q head per device at tp={tp}: (heads, head_dim) order is moot"
    if bug == "kv_heads_wrong_split":
        group = cfg.heads // cfg.kv_heads
        clamp = cfg.kv_heads - 1  # dynamic_slice clamps the start of the one kv head
        if all(
            min(i * local_heads % cfg.kv_heads, clamp) == i * local_heads // group
            for i in range(tp)
        ):
            return f"the wrong kv start equals the right one on every device at tp={tp}"
    return None


def baseline_function(cfg: LlamaConfig, output: str = "loss") -> Callable[..., Any]:
    """jit of the single-device model; `output` as in `tp_function`."""
    import jax
    from model import decoder, llama, llama_logits, stack_loss

    if output == "train":
        return jax.jit(jax.value_and_grad(partial(stack_loss, cfg=cfg)))
    if output == "step":
        from model import train_step

        return jax.jit(partial(train_step, cfg=cfg))
    body = {"loss": llama, "logits": llama_logits, "hidden": decoder, "sp_hidden": decoder}[output]
    return jax.jit(partial(body, cfg=cfg))


def tp_function(
    cfg: LlamaConfig,
    mesh: Any,
    bug: str | None,
    *,
    output: str = "loss",
    bug_layer: int | None = None,
) -> Callable[..., Any]:
    """jit(shard_map(...)) of the tp body on mesh, by output:

    "loss": (params, tokens, targets) -> loss (`tp_llama`, the full model);
    "logits": (params, tokens) -> logits split over "tp" on the vocab;
    "hidden": (layer params, x) -> hidden states, replicated (`tp_decoder`).
    """
    import jax
    from jax.sharding import PartitionSpec as P
    from model import (
        dp_tp_train_step,
        part_params,
        tp_decoder,
        tp_llama,
        tp_llama_logits,
        tp_param_specs,
        tp_stack_loss,
    )
    from padding import padded_config

    cfg = padded_config(cfg, mesh.shape["tp"])  # the converter's padded weights, if any
    specs = tp_param_specs(cfg, mesh.shape["tp"])
    # check_vma=False: the buggy bodies break replication that out_specs claims, and JAX
    # would reject them; proving the claim is Scalify's job, not the tracer's. It also
    # keeps every psum a real all-reduce, so variants differ only by their bug.
    if output == "logits":
        body = partial(tp_llama_logits, cfg=cfg, bug=bug)
        in_specs: tuple[Any, ...] = (specs, P())
        out_specs = P(None, None, "tp")
    elif output == "hidden":
        body = partial(tp_decoder, cfg=cfg, bug=bug, bug_layer=bug_layer)
        in_specs, out_specs = (part_params(specs, "layers"), P()), P()
    elif output == "sp_hidden":  # the sequence split over "tp" on the way in and out
        body = partial(tp_decoder, cfg=cfg, bug=bug, bug_layer=bug_layer, sequence_parallel=True)
        in_specs, out_specs = (part_params(specs, "layers"), P(None, "tp")), P(None, "tp")
    elif output == "step":  # (dp, tp): the batch split over dp, AdamW on each tp shard
        layer_specs = part_params(specs, "layers")
        body = partial(dp_tp_train_step, cfg=cfg)
        in_specs = (layer_specs, layer_specs, layer_specs, P("dp"))
        out_specs = (P(), layer_specs, layer_specs, layer_specs)
        smap = jax.shard_map(body, mesh=mesh, in_specs=in_specs, out_specs=out_specs)
        return jax.jit(smap)
    elif output == "train":  # gradients: JAX's check on, so each psum transposes right
        layer_specs = part_params(specs, "layers")
        body = jax.value_and_grad(partial(tp_stack_loss, cfg=cfg))
        in_specs, out_specs = (layer_specs, P()), (P(), layer_specs)
        smap = jax.shard_map(body, mesh=mesh, in_specs=in_specs, out_specs=out_specs)
        return jax.jit(smap)
    else:
        body = partial(tp_llama, cfg=cfg, bug=bug)
        in_specs, out_specs = (specs, P(), P()), P()
    smap = jax.shard_map(body, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=False)
    return jax.jit(smap)


def export_all(
    out_dir: Path,
    cfg: LlamaConfig,
    tp: int,
    seq: int = 8,
    batch: int = 2,
    bugs: Sequence[str] | None = None,
    part: str = "full",
    bug_layer: int | None = None,
    dp: int = 1,
) -> dict[str, Path]:
    """Write baseline.hlo, tp.hlo and tp_<bug>.hlo to out_dir; return {name: path}.

    part="full" exports the loss of the whole model, part="layers" the decoder stack
    (hidden states in and out). bugs=None exports every variant in model.BUGS; pass ()
    for none. A variant that changes nothing here (see `skip_reason`) is skipped with a
    note on stderr.
    """
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from model import BUGS, PARTS, param_shapes, part_params, tp_param_specs
    from padding import padded_config

    if jax.device_count() < tp * dp:
        raise RuntimeError(
            f"need {tp * dp} devices, have {jax.device_count()}: set "
            f"XLA_FLAGS=--xla_force_host_platform_device_count={tp * dp} before importing jax"
        )
    if dp > 1 and part != "train_step":
        raise ValueError("--dp is for --parts train_step (the data-parallel training step)")
    check_divisible(cfg, tp)
    bugs = BUGS if bugs is None else tuple(bugs)
    unknown = set(bugs) - set(BUGS)
    if unknown:
        raise ValueError(f"unknown bugs {sorted(unknown)}; known: {', '.join(BUGS)}")
    if part not in PARTS:
        raise ValueError(f"unknown part {part!r}; known: {', '.join(PARTS)}")

    mesh = jax.make_mesh((dp, tp), ("dp", "tp")) if part == "train_step" else None
    mesh = mesh or jax.make_mesh((tp,), ("tp",))
    is_shape = lambda x: isinstance(x, tuple) and all(isinstance(n, int) for n in x)  # noqa: E731

    # Abstract args only: lowering never allocates the weights.
    shapes = part_params(param_shapes(cfg), part)
    params = jax.tree.map(lambda s: jax.ShapeDtypeStruct(s, jnp.float32), shapes, is_leaf=is_shape)
    padded = padded_config(cfg, tp)  # the tensor-parallel body's weights, padded if need be
    sharded_params = jax.tree.map(
        lambda s, spec: jax.ShapeDtypeStruct(s, jnp.float32, sharding=NamedSharding(mesh, spec)),
        part_params(param_shapes(padded), part),
        part_params(tp_param_specs(padded, tp), part),
        is_leaf=is_shape,
    )
    replicated = NamedSharding(mesh, jax.sharding.PartitionSpec())
    if part == "sp_layers":
        replicated = NamedSharding(mesh, jax.sharding.PartitionSpec(None, "tp"))
    if part in ("train_layers", "train_step") and bugs:
        raise ValueError(f"--parts {part} exports no bug variants (use --bugs none)")
    if part in ("layers", "sp_layers", "train_layers", "train_step"):
        output = {
            "layers": "hidden",
            "sp_layers": "sp_hidden",
            "train_layers": "train",
            "train_step": "step",
        }[part]
        x_shape, x_dtype = (batch, seq, cfg.hidden), jnp.float32
        n_inputs = 1  # x
    else:
        output = "loss"
        x_shape, x_dtype = (batch, seq), jnp.int32
        n_inputs = 2  # tokens, targets
    x = jax.ShapeDtypeStruct(x_shape, x_dtype)
    sharded_x = jax.ShapeDtypeStruct(x_shape, x_dtype, sharding=replicated)
    baseline_args = (params, *[x] * n_inputs)
    tp_args = (sharded_params, *[sharded_x] * n_inputs)
    if part == "train_step":  # the weights, AdamW's two moments (laid out alike), the batch
        batch_split = NamedSharding(mesh, jax.sharding.PartitionSpec("dp"))
        baseline_args = (params, params, params, x)
        split_x = jax.ShapeDtypeStruct(x_shape, x_dtype, sharding=batch_split)
        tp_args = (sharded_params, sharded_params, sharded_params, split_x)

    variants = {
        "baseline": (baseline_function(cfg, output), baseline_args),
        "tp": (tp_function(cfg, mesh, None, output=output), tp_args),
    }
    for bug in bugs:
        reason = skip_reason(bug, cfg, tp, part)
        if reason:
            print(f"skipping tp_{bug}: {reason}", file=sys.stderr)
            continue
        variants[f"tp_{bug}"] = (
            tp_function(cfg, mesh, bug, output=output, bug_layer=bug_layer),
            tp_args,
        )

    return write_hlo(out_dir, variants)


def main(argv: list[str] | None = None) -> None:
    """CLI entry: fix the device count, then export."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    add_variant_options(ap)
    ap.add_argument("--tp", type=int, default=4)
    ap.add_argument(
        "--parts",
        choices=("full", "layers", "sp_layers", "train_layers", "train_step"),
        default="full",
    )
    ap.add_argument("--dp", type=int, default=1, help="with --parts train_step: the dp size")
    ap.add_argument("--seq", type=int, default=8)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--bugs", default="all", help="all, none, or a comma-separated list")
    ap.add_argument("--bug-layer", type=int, help="with --parts layers: the one layer to break")
    a = ap.parse_args(argv)
    if a.dp > 1 and a.parts != "train_step":
        ap.error("--dp is for --parts train_step (the data-parallel training step)")
    cfg = config_from(a)
    bugs = {"all": None, "none": ()}.get(a.bugs, [b for b in a.bugs.split(",") if b])
    set_device_count(a.tp * a.dp)
    try:
        written = export_all(a.out, cfg, a.tp, a.seq, a.batch, bugs, a.parts, a.bug_layer, a.dp)
    except ValueError as why:  # a split the config does not allow: say which, exit 2
        ap.error(str(why))
    for path in written.values():
        print(path)


if __name__ == "__main__":
    main()
