"""Export the scanned layer stack as HLO: the baseline, the correct body, one file a bug.

Usage: python examples/scan_stack/export.py --out DIR [--tp 4] [--layers 4] [--batch 8]
       [--hidden 32] [--ffn 128]
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from hlo_export import export_cli, shard_map_variants, write_hlo  # noqa: E402


def export_all(
    out_dir: Path, tp: int, layers: int, batch: int, hidden: int, ffn: int
) -> dict[str, Path]:
    import jax
    from jax.sharding import PartitionSpec as P

    sys.path.insert(0, str(HERE))
    from model import BUGS, stack, tp_stack

    args = [
        ((batch, hidden), P()),
        ((layers, hidden, ffn), P(None, None, "tp")),
        ((layers, ffn, hidden), P(None, "tp", None)),
    ]
    mesh = jax.make_mesh((tp,), ("tp",))
    return write_hlo(out_dir, shard_map_variants(mesh, stack, tp_stack, args, P(), "tp", BUGS))


def main(argv: list[str] | None = None) -> None:
    export_cli(
        __doc__,
        {"tp": 4, "layers": 4, "batch": 8, "hidden": 32, "ffn": 128},
        lambda tp, **_: tp,
        export_all,
        argv,
    )


if __name__ == "__main__":
    main()
