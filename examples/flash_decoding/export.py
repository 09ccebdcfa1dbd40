"""Export the flash-decoding step as HLO: the baseline, the correct body, one file a bug;
the same for the split-KV (m, l, o) combine (`split_baseline.hlo`, `split*.hlo`).

Usage: python examples/flash_decoding/export.py --out DIR [--tp 4] [--batch 2] [--heads 4]
       [--seq 64] [--head-dim 8]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from hlo_export import set_device_count, shard_map_variants, write_hlo  # noqa: E402


def export_all(
    out_dir: Path, tp: int, batch: int, heads: int, seq: int, head_dim: int
) -> dict[str, Path]:
    import jax
    from jax.sharding import PartitionSpec as P

    sys.path.insert(0, str(HERE))
    from model import BUGS, SPLIT_BUGS, attention, flash_decode, scaled_attention, split_decode

    kv = (batch, heads, seq, head_dim)
    args = [((batch, heads, head_dim), P()), (kv, P(None, None, "tp")), (kv, P(None, None, "tp"))]
    mesh = jax.make_mesh((tp,), ("tp",))
    written = write_hlo(
        out_dir, shard_map_variants(mesh, attention, flash_decode, args, P(), "fd", BUGS)
    )
    split = shard_map_variants(mesh, scaled_attention, split_decode, args, P(), "split", SPLIT_BUGS)
    split["split_baseline"] = split.pop("baseline")
    return {**written, **write_hlo(out_dir, split)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--tp", type=int, default=4)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--head-dim", type=int, default=8)
    a = ap.parse_args()
    set_device_count(a.tp)
    for path in export_all(a.out, a.tp, a.batch, a.heads, a.seq, a.head_dim).values():
        print(path)


if __name__ == "__main__":
    main()
