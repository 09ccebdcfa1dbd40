"""Export the MLP example as HLO text: the baseline and each tensor-parallel variant.

Usage: python examples/mlp/export.py --out DIR [--dp 2] [--tp 4] [--batch 8]
       [--hidden 64] [--ffn 256]

The CLI sets XLA_FLAGS before jax is imported, because the host-platform device
count is fixed at backend start-up. `export_all` imports jax lazily, so a caller
that imports this module must have set XLA_FLAGS itself (tests use the CLI).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from hlo_export import set_device_count, write_hlo  # noqa: E402


def export_all(
    out_dir: Path,
    dp: int,
    tp: int,
    batch: int = 8,
    hidden: int = 64,
    ffn: int = 256,
) -> dict[str, Path]:
    """Write baseline.hlo, tp.hlo and tp_<bug>.hlo to out_dir; return {name: path}.

    dp == 1 uses a 1-D ("tp",) mesh with x replicated, and skips "wrong_groups"
    because there is no "dp" axis to reduce over by mistake.
    """
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    from model import BUGS, Bug, mlp, tp_mlp

    if jax.device_count() < dp * tp:
        raise RuntimeError(
            f"need {dp * tp} devices, have {jax.device_count()}: set "
            f"XLA_FLAGS=--xla_force_host_platform_device_count={dp * tp} before importing jax"
        )
    if batch % dp or ffn % tp:
        raise ValueError(f"batch={batch} must divide by dp={dp} and ffn={ffn} by tp={tp}")

    shapes = {
        "x": (batch, hidden),
        "w1": (hidden, ffn),
        "b1": (ffn,),
        "w2": (ffn, hidden),
        "b2": (hidden,),
    }
    if dp > 1:
        mesh = jax.make_mesh((dp, tp), ("dp", "tp"))
        x_spec, out_spec = P("dp", None), P("dp", None)
    else:
        mesh = jax.make_mesh((tp,), ("tp",))
        x_spec, out_spec = P(), P()
    specs = {"x": x_spec, "w1": P(None, "tp"), "b1": P("tp"), "w2": P("tp", None), "b2": P()}

    # Abstract args only: lowering never allocates the weights.
    global_args = [jax.ShapeDtypeStruct(s, jnp.float32) for s in shapes.values()]
    sharded_args = [
        jax.ShapeDtypeStruct(shapes[k], jnp.float32, sharding=NamedSharding(mesh, specs[k]))
        for k in shapes
    ]

    def tp_fn(bug: Bug | None) -> Callable[..., Any]:
        # check_vma=False: the buggy bodies break replication that out_specs claims, and
        # JAX would reject them; proving the claim is Scalify's job, not the tracer's. It
        # also keeps every psum a real all-reduce, so variants differ only by their bug.
        body = partial(tp_mlp, bug=bug)
        in_specs = tuple(specs.values())
        smap = jax.shard_map(
            body, mesh=mesh, in_specs=in_specs, out_specs=out_spec, check_vma=False
        )
        return jax.jit(smap)

    variants = {"baseline": (jax.jit(mlp), global_args), "tp": (tp_fn(None), sharded_args)}
    for bug in BUGS:
        if bug == "wrong_groups" and dp == 1:
            continue
        variants[f"tp_{bug}"] = (tp_fn(bug), sharded_args)

    return write_hlo(out_dir, variants)


def main(argv: list[str] | None = None) -> None:
    """CLI entry: fix the device count, then export."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--dp", type=int, default=2)
    ap.add_argument("--tp", type=int, default=4)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--ffn", type=int, default=256)
    a = ap.parse_args(argv)
    set_device_count(a.dp * a.tp)
    for path in export_all(a.out, a.dp, a.tp, a.batch, a.hidden, a.ffn).values():
        print(path)


if __name__ == "__main__":
    main()
