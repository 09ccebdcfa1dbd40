"""Export the scanned layer stack as HLO: the baseline, the correct body, one file a bug.

Usage: python examples/scan_stack/export.py --out DIR [--tp 4] [--layers 4] [--batch 8]
       [--hidden 32] [--ffn 128]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from hlo_export import set_device_count, shard_map_variants, write_hlo  # noqa: E402


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--tp", type=int, default=4)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--ffn", type=int, default=128)
    a = ap.parse_args()
    set_device_count(a.tp)
    for path in export_all(a.out, a.tp, a.layers, a.batch, a.hidden, a.ffn).values():
        print(path)


if __name__ == "__main__":
    main()
