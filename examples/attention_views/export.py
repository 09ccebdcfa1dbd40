"""Export the attention example as HLO: the baseline, the correct body, one file a bug.

Usage: python examples/attention_views/export.py --out DIR [--tp 4] [--batch 2] [--seq 8]
       [--hidden 64] [--heads 8]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from hlo_export import example_model, export_cli, shard_map_variants, write_hlo  # noqa: E402


def export_all(
    out_dir: Path, tp: int = 4, batch: int = 2, seq: int = 8, hidden: int = 64, heads: int = 8
) -> dict[str, Path]:
    import jax
    from jax.sharding import PartitionSpec as P

    model = example_model(__file__)

    width = heads * model.HEAD_DIM
    column, row = P(None, "tp"), P("tp", None)
    args = [
        ((batch, seq, hidden), P()),
        ((hidden, width), column),
        ((hidden, width), column),
        ((hidden, width), column),
        ((width, hidden), row),
    ]
    mesh = jax.make_mesh((tp,), ("tp",))
    variants = shard_map_variants(
        mesh, model.attention, model.tp_attention, args, P(), "tp", model.BUGS
    )
    return write_hlo(out_dir, variants)


if __name__ == "__main__":
    export_cli(__doc__, export_all, devices=("tp",))
