"""Flax's own Gemma example, tiny and random, partitioned by XLA the way its `train.py` shards
it, with both programs dumped for Scalify.

    python tests/real/flax_gemma.py OUT --mesh fsdp=1,tensor=2 [--part full|embed]
        [--heads 8 --kv-heads 4]

The model code is `examples/gemma` of flax's source distribution on PyPI, unchanged (fetched
once into the cache by `example_dir`). It is sharded as `train.py` shards it:
`ShardingConfig.fsdp_tp_sharding` on a `("fsdp", "tensor")` mesh, tokens split over fsdp,
built and jitted under `jax.set_mesh`. OUT gets `baseline.hlo` (XLA's module before SPMD
partitioning: the global program with its sharding annotations) and `dist.hlo` (after: the
per-device program).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import types
from importlib.metadata import version
from pathlib import Path


def example_dir() -> Path:
    """flax's examples/gemma for the installed flax, from its sdist on PyPI (cached)."""
    flax_version = version("flax")
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "scalify"
    target = cache / f"flax-{flax_version}-examples" / "gemma"
    if (target / "transformer.py").is_file():
        return target
    with tempfile.TemporaryDirectory() as folder:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--no-binary",
                ":all:",
                f"flax=={flax_version}",
                "-d",
                folder,
            ],
            check=True,
        )
        (sdist,) = Path(folder).glob("flax-*.tar.gz")
        prefix = f"flax-{flax_version}/examples/gemma/"
        with tarfile.open(sdist) as archive:
            members = [m for m in archive.getmembers() if m.name.startswith(prefix)]
            staging = target.parent / "staging"
            archive.extractall(staging, members=members, filter="data")
        shutil.rmtree(target, ignore_errors=True)
        (staging / prefix).rename(target)
        shutil.rmtree(staging)
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--mesh", required=True, help="fsdp=F,tensor=T")
    parser.add_argument("--part", choices=["full", "embed", "embed_grad"], default="full")
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--kv-heads", type=int, default=4)
    args = parser.parse_args()
    sizes = dict(pair.split("=") for pair in args.mesh.split(","))
    shape = (int(sizes["fsdp"]), int(sizes["tensor"]))
    dump = args.out / "dump"
    os.environ["XLA_FLAGS"] = (
        f"--xla_force_host_platform_device_count={shape[0] * shape[1]} "
        f"--xla_dump_to={dump} --xla_dump_hlo_pass_re=spmd-partitioning"
    )
    _import_example(example_dir())
    _export(args, shape)
    files = sorted(dump.glob("*jit_forward*"))
    (before,) = [p for p in files if "before_spmd-partitioning" in p.name]
    (after,) = [p for p in files if "after_spmd-partitioning" in p.name]
    shutil.copy(before, args.out / "baseline.hlo")
    shutil.copy(after, args.out / "dist.hlo")


def _import_example(folder: Path) -> None:
    """The example imports its modules by bare name; `params.py` imports orbax only to
    load checkpoints, which a random model never does."""
    sys.path.insert(0, str(folder))
    try:
        import orbax.checkpoint  # noqa: F401
    except ImportError:
        orbax = types.ModuleType("orbax")
        orbax.checkpoint = types.ModuleType("orbax.checkpoint")
        sys.modules.update({"orbax": orbax, "orbax.checkpoint": orbax.checkpoint})


def _export(args, shape: tuple[int, int]) -> None:
    import jax
    import jax.numpy as jnp
    import numpy as np
    import sow_lib
    import transformer as transformer_lib
    from flax import nnx
    from jax.sharding import NamedSharding
    from transformer_cfg import (
        AttentionType,
        QueryPreAttentionNormalisation,
        ShardingConfig,
        TransformerConfig,
    )

    mesh = jax.make_mesh(shape, ("fsdp", "tensor"))
    sharding = ShardingConfig.fsdp_tp_sharding(
        fsdp_axis_name="fsdp", tensor_parallel_axis_name="tensor"
    )
    config = TransformerConfig(
        num_layers=2,
        num_embed=256,
        embed_dim=128,
        hidden_dim=256,
        num_heads=args.heads,
        head_dim=16,
        num_kv_heads=args.kv_heads,
        final_logit_softcap=None,
        use_post_attn_norm=True,
        use_post_ffw_norm=True,
        use_qk_norm=True,
        attention_types=(AttentionType.LOCAL_SLIDING, AttentionType.GLOBAL),
        query_pre_attn_norm=QueryPreAttentionNormalisation.BY_ONE_OVER_SQRT_HEAD_DIM,
        attn_logits_soft_cap=None,
        sliding_window_size=8,
        transpose_gating_einsum=True,
        local_base_frequency=10_000,
        global_base_frequency=1_000_000,
        global_scale_factor=8.0,
        dtype=jnp.float32,
        shd_config=sharding,
    )
    with jax.set_mesh(mesh):
        model = transformer_lib.Transformer(
            config, rngs=nnx.Rngs(params=0, dropout=0), sow_config=sow_lib.SowConfig()
        )
        graphdef, state = nnx.split(model)

        def embedded(state, inputs):
            model = nnx.merge(graphdef, state)
            return model.embedder(inputs, out_sharding=sharding.act_btd)

        def forward(state, inputs):  # as train.py's eval_step calls the model
            model = nnx.merge(graphdef, state)
            if args.part == "embed":
                return embedded(state, inputs)
            if args.part == "embed_grad":  # the embedding table's gradient, from autograd
                loss = lambda s: jnp.sum(jnp.square(embedded(s, inputs)))  # noqa: E731
                return jax.grad(loss)(state)
            input_mask = inputs > 0
            positions = transformer_lib.build_positions_from_mask(input_mask)
            attention_mask = transformer_lib.make_causal_attn_mask(input_mask)
            logits, _ = model(
                inputs, positions=positions, attention_mask=attention_mask, cache=None
            )
            return logits

        tokens = np.random.RandomState(0).randint(1, 256, (2, 16)).astype(np.int32)
        tokens = jax.device_put(tokens, NamedSharding(mesh, jax.P(("fsdp",))))
        jax.jit(forward).lower(state, tokens).compile()


if __name__ == "__main__":
    main()
