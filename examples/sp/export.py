"""Export the sequence-parallel block as HLO: the baseline, the correct body, one file a bug.

Usage: python examples/sp/export.py --out DIR [--tp 4] [--batch 2] [--seq 32] [--hidden 32]
       [--ffn 128]
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
    out_dir: Path, tp: int, batch: int, seq: int, hidden: int, ffn: int
) -> dict[str, Path]:
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    sys.path.insert(0, str(HERE))
    from model import BUGS, block, sp_block

    mesh = jax.make_mesh((tp,), ("tp",))
    shapes = {"x": (batch, seq, hidden), "wn": (hidden,), "w1": (hidden, ffn), "w2": (ffn, hidden)}
    specs = {"x": P(None, "tp"), "wn": P(), "w1": P(None, "tp"), "w2": P("tp", None)}
    global_args = [jax.ShapeDtypeStruct(s, jnp.float32) for s in shapes.values()]
    local_args = [
        jax.ShapeDtypeStruct(shapes[k], jnp.float32, sharding=NamedSharding(mesh, specs[k]))
        for k in shapes
    ]

    def sp_fn(bug):
        body = partial(sp_block, bug=bug)
        return jax.jit(
            jax.shard_map(
                body,
                mesh=mesh,
                in_specs=tuple(specs.values()),
                out_specs=P(None, "tp"),
                check_vma=False,
            )
        )

    variants = {"baseline": (jax.jit(block), global_args), "sp": (sp_fn(None), local_args)}
    for bug in BUGS:
        variants[f"sp_{bug}"] = (sp_fn(bug), local_args)
    return write_hlo(out_dir, variants)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--tp", type=int, default=4)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--ffn", type=int, default=128)
    a = ap.parse_args()
    set_device_count(a.tp)
    for path in export_all(a.out, a.tp, a.batch, a.seq, a.hidden, a.ffn).values():
        print(path)


if __name__ == "__main__":
    main()
