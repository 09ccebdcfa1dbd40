"""Matmuls on a 2-D mesh with one dim split over both axes: the order of the axes decides
which device holds which block. Writes `baseline.hlo` and `tp.hlo` (a column-parallel
matmul, weight columns and output split over ("dp", "tp")), `tp_blocks_in_wrong_order.hlo`
(the weight split over ("tp", "dp") while the output claims ("dp", "tp")), and
`row_baseline.hlo`, `row.hlo` (a row-parallel matmul, the contracted dim split over
("dp", "tp") in both operands, then an all-reduce) and `row_contraction_mismatched.hlo`
(the weight's rows split over ("tp", "dp"): each device multiplies blocks that do not pair).

    python examples/block_order/export.py --out DIR
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from hlo_export import set_device_count, write_hlo  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    out = ap.parse_args().out
    set_device_count(4)
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = jax.make_mesh((2, 2), ("dp", "tp"))
    x, w = jax.ShapeDtypeStruct((4, 16), jnp.float32), jax.ShapeDtypeStruct((16, 8), jnp.float32)

    def model(x, w):
        return jnp.tanh(x @ w)

    def variant(weight_axes: tuple[str, str]):
        specs = (P(), P(None, weight_axes))
        args = [
            jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=NamedSharding(mesh, s))
            for a, s in zip((x, w), specs, strict=True)
        ]
        body = jax.shard_map(
            model, mesh=mesh, in_specs=specs, out_specs=P(None, ("dp", "tp")), check_vma=False
        )
        return jax.jit(body), args

    def row_parallel(x, w):
        return jnp.tanh(jax.lax.psum(x @ w, ("dp", "tp")))

    def row_variant(weight_axes: tuple[str, str]):
        specs = (P(None, ("dp", "tp")), P(weight_axes, None))
        args = [
            jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=NamedSharding(mesh, s))
            for a, s in zip((x, w), specs, strict=True)
        ]
        body = jax.shard_map(
            row_parallel, mesh=mesh, in_specs=specs, out_specs=P(), check_vma=False
        )
        return jax.jit(body), args

    write_hlo(
        out,
        {
            "baseline": (jax.jit(model), [x, w]),
            "tp": variant(("dp", "tp")),
            "tp_blocks_in_wrong_order": variant(("tp", "dp")),  # BUG: blocks_in_wrong_order
            "row_baseline": (jax.jit(model), [x, w]),
            "row": row_variant(("dp", "tp")),
            "row_contraction_mismatched": row_variant(("tp", "dp")),  # BUG: contraction_mismatched
        },
    )


if __name__ == "__main__":
    main()
