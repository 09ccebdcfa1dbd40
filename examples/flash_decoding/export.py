"""Export the flash-decoding step as HLO: the baseline, the correct body, one file a bug.

Usage: python examples/flash_decoding/export.py --out DIR [--tp 4] [--batch 2] [--heads 4]
       [--seq 64] [--head-dim 8]
"""

from __future__ import annotations

import argparse
import sys
from functools import partial
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from hlo_export import set_device_count, write_hlo  # noqa: E402


def export_all(
    out_dir: Path, tp: int, batch: int, heads: int, seq: int, head_dim: int
) -> dict[str, Path]:
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    sys.path.insert(0, str(HERE))
    from model import BUGS, attention, flash_decode

    mesh = jax.make_mesh((tp,), ("tp",))
    shapes = [
        (batch, heads, head_dim),
        (batch, heads, seq, head_dim),
        (batch, heads, seq, head_dim),
    ]
    specs = [P(), P(None, None, "tp"), P(None, None, "tp")]
    global_args = [jax.ShapeDtypeStruct(s, jnp.float32) for s in shapes]
    local_args = [
        jax.ShapeDtypeStruct(s, jnp.float32, sharding=NamedSharding(mesh, p))
        for s, p in zip(shapes, specs, strict=True)
    ]

    def body(bug):
        return jax.jit(
            jax.shard_map(
                partial(flash_decode, bug=bug),
                mesh=mesh,
                in_specs=tuple(specs),
                out_specs=P(),
                check_vma=False,
            )
        )

    variants = {"baseline": (jax.jit(attention), global_args), "fd": (body(None), local_args)}
    for bug in BUGS:
        variants[f"fd_{bug}"] = (body(bug), local_args)
    return write_hlo(out_dir, variants)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--tp", type=int, default=4)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--head-dim", type=int, default=8)
    a = ap.parse_args()
    set_device_count(a.tp)
    for path in export_all(a.out, a.tp, a.batch, a.heads, a.seq, a.head_dim).values():
        print(path)


if __name__ == "__main__":
    main()
