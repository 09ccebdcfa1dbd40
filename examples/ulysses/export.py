"""Export the Ulysses attention block as HLO: the baseline, the correct body, one file a bug.

Usage: python examples/ulysses/export.py --out DIR [--sp 4] [--batch 2] [--seq 32] [--hidden 64]
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from hlo_export import export_cli, shard_map_variants, write_hlo  # noqa: E402


def export_all(out_dir: Path, sp: int, batch: int, seq: int, hidden: int) -> dict[str, Path]:
    import jax
    from jax.sharding import PartitionSpec as P

    sys.path.insert(0, str(HERE))
    from model import BUGS, attention_block, ulysses_block

    weight = ((hidden, hidden), P())
    args = [((seq, batch, hidden), P("sp")), weight, weight, weight, weight]
    mesh = jax.make_mesh((sp,), ("sp",))
    variants = shard_map_variants(
        mesh, attention_block, ulysses_block, args, P("sp"), "ulysses", BUGS
    )
    return write_hlo(out_dir, variants)


def main(argv: list[str] | None = None) -> None:
    export_cli(
        __doc__,
        {"sp": 4, "batch": 2, "seq": 32, "hidden": 64},
        lambda sp, **_: sp,
        export_all,
        argv,
    )


if __name__ == "__main__":
    main()
