"""Export the Ulysses attention block as HLO: the baseline, the correct body, one file a bug.

Usage: python examples/ulysses/export.py --out DIR [--sp 4] [--batch 2] [--seq 32] [--hidden 64]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from hlo_export import example_model, export_cli, shard_map_variants, write_hlo  # noqa: E402


def export_all(
    out_dir: Path, sp: int = 4, batch: int = 2, seq: int = 32, hidden: int = 64
) -> dict[str, Path]:
    import jax
    from jax.sharding import PartitionSpec as P

    model = example_model(__file__)

    weight = ((hidden, hidden), P())
    args = [((seq, batch, hidden), P("sp")), weight, weight, weight, weight]
    mesh = jax.make_mesh((sp,), ("sp",))
    variants = shard_map_variants(
        mesh, model.attention_block, model.ulysses_block, args, P("sp"), "ulysses", model.BUGS
    )
    return write_hlo(out_dir, variants)


if __name__ == "__main__":
    export_cli(__doc__, export_all, devices=("sp",))
