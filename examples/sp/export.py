"""Export the sequence-parallel block as HLO: the baseline, the correct body, one file a bug.

Usage: python examples/sp/export.py --out DIR [--tp 4] [--batch 2] [--seq 32] [--hidden 32]
       [--ffn 128]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from hlo_export import example_model, export_cli, shard_map_variants, write_hlo  # noqa: E402


def export_all(
    out_dir: Path, tp: int = 4, batch: int = 2, seq: int = 32, hidden: int = 32, ffn: int = 128
) -> dict[str, Path]:
    import jax
    from jax.sharding import PartitionSpec as P

    model = example_model(__file__)

    args = [
        ((batch, seq, hidden), P(None, "tp")),
        ((hidden,), P()),
        ((hidden, ffn), P(None, "tp")),
        ((ffn, hidden), P("tp", None)),
    ]
    mesh = jax.make_mesh((tp,), ("tp",))
    return write_hlo(
        out_dir,
        shard_map_variants(
            mesh, model.block, model.sp_block, args, P(None, "tp"), "sp", model.BUGS
        ),
    )


if __name__ == "__main__":
    export_cli(__doc__, export_all, devices=("tp",))
