"""Export the MLP example as HLO text: the baseline and each tensor-parallel variant.

Usage: python examples/mlp/export.py --out DIR [--dp 2] [--tp 4] [--batch 8]
       [--hidden 64] [--ffn 256]

The CLI sets XLA_FLAGS before jax is imported, because the host-platform device
count is fixed at backend start-up. `export_all` imports jax lazily, so a caller
that imports this module must have set XLA_FLAGS itself (tests use the CLI).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from hlo_export import example_model, export_cli, shard_map_variants, write_hlo  # noqa: E402


def export_all(
    out_dir: Path, dp: int = 2, tp: int = 4, batch: int = 8, hidden: int = 64, ffn: int = 256
) -> dict[str, Path]:
    """Write baseline.hlo, tp.hlo and tp_<bug>.hlo to out_dir; return {name: path}.

    dp == 1 uses a 1-D ("tp",) mesh with x replicated, and skips "wrong_groups"
    because there is no "dp" axis to reduce over by mistake.
    """
    import jax
    from jax.sharding import PartitionSpec as P

    model = example_model(__file__)

    if jax.device_count() < dp * tp:
        raise RuntimeError(
            f"need {dp * tp} devices, have {jax.device_count()}: set "
            f"XLA_FLAGS=--xla_force_host_platform_device_count={dp * tp} before importing jax"
        )
    if batch % dp or ffn % tp:
        raise ValueError(f"batch={batch} must divide by dp={dp} and ffn={ffn} by tp={tp}")

    if dp > 1:
        mesh = jax.make_mesh((dp, tp), ("dp", "tp"))
        x_spec, out_spec = P("dp", None), P("dp", None)
    else:
        mesh = jax.make_mesh((tp,), ("tp",))
        x_spec, out_spec = P(), P()
    args = [
        ((batch, hidden), x_spec),
        ((hidden, ffn), P(None, "tp")),
        ((ffn,), P("tp")),
        ((ffn, hidden), P("tp", None)),
        ((hidden,), P()),
    ]
    bugs = tuple(bug for bug in model.BUGS if not (bug == "wrong_groups" and dp == 1))
    return write_hlo(
        out_dir, shard_map_variants(mesh, model.mlp, model.tp_mlp, args, out_spec, "tp", bugs)
    )


if __name__ == "__main__":
    export_cli(__doc__, export_all, devices=("dp", "tp"))
