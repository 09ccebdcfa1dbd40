"""EasyDeL's Llama (or another of its model families), tiny and random, sharded by EasyDeL's
own partition rules and partitioned by XLA, with both programs dumped for Scalify (the
`*.hlo.gz` pairs beside this file).

    python tests/real/easydel/export.py OUT --dims 1,1,1,2,1 [--mask]   # dp,fsdp,ep,tp,sp
    python tests/real/easydel/export.py OUT --dims 1,2,1,2,2 --mask --family Gemma2 \
        --config '{"head_dim": 16}'

`--family NAME`: EasyDeL's `NAMEConfig` (`NAMETextConfig` where there is one) and
`NAMEForCausalLM`, given the same tiny sizes; `--config`: more of that config's fields, as
JSON, in the family's own names (GPT-J's `n_layer`, `n_embd`), a null dropping a tiny one.

`--mask`: the forward is also given `attention_mask` and `position_ids`, as training batches
pass them (the `*_mask_*` pairs); without, EasyDeL computes the positions with a scan.

EasyDeL (0.3.0) pins its own flax and transformers and imports ray and the Google Cloud
clients at start-up, so it lives in a venv of its own that reuses this one's jax and flax:

    python -m venv --system-site-packages VENV
    VENV/bin/pip install --no-deps easydel==0.3.0 eformer==0.0.99.12 ejkernel==0.0.78 \
        ray google-cloud-storage google-cloud-core google-api-core google-auth \
        google-resumable-media google-crc32c googleapis-common-protos proto-plus contextlib2 \
        beartype chex toolz tblib mergedeep plum-dispatch braceexpand msgspec pyzmq \
        partial-json-parser fastapi starlette uvicorn

The model is built and sharded as EasyDeL's trainer does it: `sharding_axis_dims` over its
`(dp, fsdp, ep, tp, sp)` mesh, `shard_model()`, `split_module()`, the forward jitted with the
state's own shardings and the tokens split over (dp, fsdp) and sp. OUT gets `baseline.hlo`
(XLA's module before SPMD partitioning) and `dist.hlo` (after: one device's program).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--dims", default="1,1,1,2,1", help="dp,fsdp,ep,tp,sp")
    parser.add_argument("--mask", action="store_true", help="pass attention_mask, position_ids")
    parser.add_argument("--family", default="Llama", help="an EasyDeL model family")
    parser.add_argument("--config", default="{}", help="more config fields, as JSON")
    args = parser.parse_args()
    dims = tuple(int(x) for x in args.dims.split(","))
    devices = 1
    for size in dims:
        devices *= size
    dump = args.out / "dump"
    shutil.rmtree(dump, ignore_errors=True)
    os.environ["XLA_FLAGS"] = (
        f"--xla_force_host_platform_device_count={devices} "
        f"--xla_dump_to={dump} --xla_dump_hlo_pass_re=spmd-partitioning"
    )
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    _export(dims, args.mask, args.family, json.loads(args.config))
    files = sorted(dump.glob("*jit_forward*"))
    (before,) = [p for p in files if "before_spmd-partitioning" in p.name]
    (after,) = [p for p in files if "after_spmd-partitioning" in p.name]
    (args.out / "baseline.hlo").write_text(_without_machine_paths(before.read_text()))
    (args.out / "dist.hlo").write_text(_without_machine_paths(after.read_text()))


def _without_machine_paths(text: str) -> str:
    """The module's file table names this machine's folders; the stored pairs name the
    package's files under a neutral `/venv` and this repo's relative to its root."""
    root = str(Path(__file__).resolve().parents[3]) + "/"
    text = text.replace(f'"{root}', '"')
    return re.sub(r'"[^"\n]*?/(lib/python3\.\d+/site-packages/)', r'"/venv/\1', text)


def _export(dims: tuple[int, ...], mask: bool, family: str, fields: dict) -> None:
    import easydel as ed
    import jax
    import jax.numpy as jnp
    import numpy as np
    from flax import nnx
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    # importing easydel appends GPU flags that a CPU-only jaxlib rejects as unknown
    flags = os.environ["XLA_FLAGS"].split()
    os.environ["XLA_FLAGS"] = " ".join(f for f in flags if not f.startswith("--xla_gpu"))
    # ejkernel turns on the persistent compilation cache: a cached program is not compiled
    # again, and so not dumped
    jax.config.update("jax_enable_compilation_cache", False)
    tiny = {  # `--config` may change any of these (KV heads fewer than tp, ...)
        "vocab_size": 256,
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "max_position_embeddings": 64,
    }
    # a family with a text config of its own (Gemma 3 and 4, Llama 4) takes that one; a
    # field given as null drops the tiny default (Falcon's KV heads are `num_kv_heads`)
    config_class = getattr(ed, f"{family}TextConfig", None) or getattr(ed, f"{family}Config")
    config = config_class(
        **{k: v for k, v in {**tiny, **fields}.items() if v is not None},
        sharding_axis_dims=dims,
        sharding_axis_names=("dp", "fsdp", "ep", "tp", "sp"),
        attn_mechanism="vanilla",
        attn_dtype=jnp.float32,
    )
    model = getattr(ed, f"{family}ForCausalLM")(
        config=config,
        dtype=jnp.float32,
        param_dtype=jnp.float32,
        precision=jax.lax.Precision.HIGHEST,
        rngs=nnx.Rngs(0),
    )
    mesh = model.mesh
    with mesh:
        model = model.shard_model()
        graphdef, graphstate, graphother = model.split_module()
        # a weight no partition rule names (Gemma 4's `layer_scalar`) stays on one device:
        # replicated, as a rule would place it
        graphstate, graphother = (
            jax.tree_util.tree_map(lambda x: _replicated_if_unplaced(x, mesh), tree)
            for tree in (graphstate, graphother)
        )
        state_shardings = jax.tree_util.tree_map(lambda x: x.sharding, graphstate)
        other_shardings = jax.tree_util.tree_map(lambda x: x.sharding, graphother)
        axes = config.partition_axis
        tokens_sharding = NamedSharding(mesh, P(axes.batch_axis, axes.sequence_axis))
        tokens = np.random.RandomState(0).randint(1, 256, (2, 16)).astype(np.int32)
        tokens = jax.device_put(tokens, tokens_sharding)
        extra = ()
        if mask:
            ones = np.ones((2, 16), np.bool_)
            positions = np.broadcast_to(np.arange(16, dtype=np.int32), (2, 16)).copy()
            extra = tuple(jax.device_put(a, tokens_sharding) for a in (ones, positions))

        def forward(graphstate, graphother, input_ids, *extra):
            module = nnx.merge(graphdef, graphstate, graphother)
            module.eval()
            if extra:
                attention_mask, position_ids = extra
                return module(
                    input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids
                ).logits
            return module(input_ids=input_ids).logits

        shardings = (state_shardings, other_shardings) + (tokens_sharding,) * (1 + len(extra))
        jitted = jax.jit(forward, in_shardings=shardings)
        jitted.lower(graphstate, graphother, tokens, *extra).compile()


def _replicated_if_unplaced(leaf, mesh):
    """A state leaf the partition rules gave no sharding over the mesh, replicated over it."""
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    if isinstance(leaf, jax.Array) and not isinstance(leaf.sharding, NamedSharding):
        return jax.device_put(leaf, NamedSharding(mesh, P()))
    return leaf


if __name__ == "__main__":
    main()
