"""Export the scanned layer stack as HLO: the baseline, the correct body, one file a bug.

Usage: python examples/scan_stack/export.py --out DIR [--tp 4] [--layers 4] [--batch 8]
       [--hidden 32] [--ffn 128]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from hlo_export import example_model, export_cli, shard_map_variants, write_hlo  # noqa: E402


def export_all(
    out_dir: Path, tp: int = 4, layers: int = 4, batch: int = 8, hidden: int = 32, ffn: int = 128
) -> dict[str, Path]:
    import jax
    from jax.sharding import PartitionSpec as P

    model = example_model(__file__)

    args = [
        ((batch, hidden), P()),
        ((layers, hidden, ffn), P(None, None, "tp")),
        ((layers, ffn, hidden), P(None, "tp", None)),
    ]
    mesh = jax.make_mesh((tp,), ("tp",))
    return write_hlo(
        out_dir, shard_map_variants(mesh, model.stack, model.tp_stack, args, P(), "tp", model.BUGS)
    )


if __name__ == "__main__":
    export_cli(__doc__, export_all, devices=("tp",))
