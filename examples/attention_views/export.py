"""Export the attention example as HLO: the baseline, the correct body, one file a bug.

Usage: python examples/attention_views/export.py --out DIR [--tp 4] [--batch 2] [--seq 8]
       [--hidden 64] [--heads 8]
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from hlo_export import export_cli, shard_map_variants, write_hlo  # noqa: E402


def export_all(
    out_dir: Path, tp: int, batch: int, seq: int, hidden: int, heads: int
) -> dict[str, Path]:
    import jax
    from jax.sharding import PartitionSpec as P

    sys.path.insert(0, str(HERE))
    from model import BUGS, HEAD_DIM, attention, tp_attention

    width = heads * HEAD_DIM
    column, row = P(None, "tp"), P("tp", None)
    args = [
        ((batch, seq, hidden), P()),
        ((hidden, width), column),
        ((hidden, width), column),
        ((hidden, width), column),
        ((width, hidden), row),
    ]
    mesh = jax.make_mesh((tp,), ("tp",))
    variants = shard_map_variants(mesh, attention, tp_attention, args, P(), "tp", BUGS)
    return write_hlo(out_dir, variants)


def main(argv: list[str] | None = None) -> None:
    export_cli(
        __doc__,
        {"tp": 4, "batch": 2, "seq": 8, "hidden": 64, "heads": 8},
        lambda tp, **_: tp,
        export_all,
        argv,
    )


if __name__ == "__main__":
    main()
