"""Export the sequence-parallel block as HLO: the baseline, the correct body, one file a bug.

Usage: python examples/sp/export.py --out DIR [--tp 4] [--batch 2] [--seq 32] [--hidden 32]
       [--ffn 128]
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from hlo_export import export_cli, shard_map_variants, write_hlo  # noqa: E402


def export_all(
    out_dir: Path, tp: int, batch: int, seq: int, hidden: int, ffn: int
) -> dict[str, Path]:
    import jax
    from jax.sharding import PartitionSpec as P

    sys.path.insert(0, str(HERE))
    from model import BUGS, block, sp_block

    args = [
        ((batch, seq, hidden), P(None, "tp")),
        ((hidden,), P()),
        ((hidden, ffn), P(None, "tp")),
        ((ffn, hidden), P("tp", None)),
    ]
    mesh = jax.make_mesh((tp,), ("tp",))
    return write_hlo(
        out_dir, shard_map_variants(mesh, block, sp_block, args, P(None, "tp"), "sp", BUGS)
    )


def main(argv: list[str] | None = None) -> None:
    export_cli(
        __doc__,
        {"tp": 4, "batch": 2, "seq": 32, "hidden": 32, "ffn": 128},
        lambda tp, **_: tp,
        export_all,
        argv,
    )


if __name__ == "__main__":
    main()
