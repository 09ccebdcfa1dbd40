"""Export the Mixtral decoder stack as HLO: the baseline and each expert/tensor-parallel variant.

Usage: python examples/mixtral/export.py --out DIR [--config tiny|8x7b|8x22b] [--ep 2]
       [--tp 2] [--layers N] [--seq 8] [--batch 2] [--bugs all|none|name,...]
       [--shared-expert FFN]

The stack takes replicated hidden states (batch, seq, hidden) through every layer and the
final RMSNorm. Arguments are ShapeDtypeStructs, so the full configs lower without
allocating a weight.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from functools import partial
from pathlib import Path

HERE = Path(__file__).resolve().parent
for folder in (HERE.parent, HERE):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

from hlo_export import set_device_count, write_hlo  # noqa: E402
from mixtral_config import CONFIGS, MixtralConfig  # noqa: E402


def check_divisible(cfg: MixtralConfig, ep: int, tp: int) -> None:
    bad = [f"{n} by tp" for n in ("heads", "kv_heads", "ffn", "shared_ffn") if getattr(cfg, n) % tp]
    if cfg.experts % ep:
        bad.append("experts by ep")
    if bad:
        raise ValueError(f"ep={ep}, tp={tp} does not split {', '.join(bad)} of {cfg}")


def export_all(
    out_dir: Path,
    cfg: MixtralConfig,
    ep: int,
    tp: int,
    seq: int = 8,
    batch: int = 2,
    bugs: tuple[str, ...] | None = None,
) -> dict[str, Path]:
    """Write baseline.hlo, ep.hlo and ep_<bug>.hlo to out_dir; return {name: path}."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P
    from model import BUGS, SHARED_EXPERT_BUGS, decoder, ep_decoder, param_shapes, param_specs

    check_divisible(cfg, ep, tp)
    if bugs is None:
        bugs = tuple(b for b in BUGS if cfg.shared_ffn or b not in SHARED_EXPERT_BUGS)
    mesh = jax.make_mesh((ep, tp), ("ep", "tp"))
    is_shape = lambda x: isinstance(x, tuple) and all(isinstance(n, int) for n in x)  # noqa: E731
    shapes = param_shapes(cfg)
    params = jax.tree.map(lambda s: jax.ShapeDtypeStruct(s, jnp.float32), shapes, is_leaf=is_shape)
    sharded = jax.tree.map(
        lambda s, spec: jax.ShapeDtypeStruct(s, jnp.float32, sharding=NamedSharding(mesh, spec)),
        shapes,
        param_specs(cfg),
        is_leaf=is_shape,
    )
    x = jax.ShapeDtypeStruct((batch, seq, cfg.hidden), jnp.float32)
    x_rep = jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=NamedSharding(mesh, P()))

    def body(bug: str | None):
        smap = jax.shard_map(
            partial(ep_decoder, cfg=cfg, bug=bug),
            mesh=mesh,
            in_specs=(param_specs(cfg), P()),
            out_specs=P(),
            check_vma=False,  # buggy bodies break the replication out_specs claims
        )
        return jax.jit(smap)

    variants = {
        "baseline": (jax.jit(partial(decoder, cfg=cfg)), (params, x)),
        "ep": (body(None), (sharded, x_rep)),
    }
    for bug in bugs:
        variants[f"ep_{bug}"] = (body(bug), (sharded, x_rep))
    return write_hlo(out_dir, variants)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--config", choices=sorted(CONFIGS), default="tiny")
    ap.add_argument("--ep", type=int, default=2)
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--layers", type=int, help="override the config's layer count")
    ap.add_argument("--seq", type=int, default=8)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--bugs", default="all", help="all, none, or a comma-separated list")
    ap.add_argument(
        "--shared-expert",
        type=int,
        default=0,
        metavar="FFN",
        help="add a shared expert of this ffn size (DeepSeek/Qwen-MoE style)",
    )
    a = ap.parse_args(argv)
    cfg = dataclasses.replace(CONFIGS[a.config], shared_ffn=a.shared_expert)
    if a.layers is not None:
        cfg = dataclasses.replace(cfg, layers=a.layers)
    bugs = {"all": None, "none": ()}.get(a.bugs, tuple(b for b in a.bugs.split(",") if b))
    set_device_count(a.ep * a.tp)
    for path in export_all(a.out, cfg, a.ep, a.tp, a.seq, a.batch, bugs).values():
        print(path)


if __name__ == "__main__":
    main()
