"""Export the flash-decoding step as HLO: the baseline, the correct body, one file a bug;
the same for the split-KV (m, l, o) combine (`split_baseline.hlo`, `split*.hlo`); the
single-device split-KV kernel over KV chunks (`chunked*.hlo`, baseline `split_baseline.hlo`).

Usage: python examples/flash_decoding/export.py --out DIR [--tp 4] [--batch 2] [--heads 4]
       [--seq 64] [--head-dim 8] [--chunks 4]
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from hlo_export import export_cli, shard_map_variants, write_hlo  # noqa: E402


def export_all(
    out_dir: Path, tp: int, batch: int, heads: int, seq: int, head_dim: int, chunks: int
) -> dict[str, Path]:
    from functools import partial

    import jax
    from jax.sharding import PartitionSpec as P

    sys.path.insert(0, str(HERE))
    from model import (
        BUGS,
        CHUNK_BUGS,
        LSE_BUGS,
        SPLIT_BUGS,
        attention,
        chunked_decode,
        chunked_lse_decode,
        flash_decode,
        lse_decode,
        scaled_attention,
        split_decode,
        split_decode_keepdims,
    )

    kv = (batch, heads, seq, head_dim)
    args = [((batch, heads, head_dim), P()), (kv, P(None, None, "tp")), (kv, P(None, None, "tp"))]
    mesh = jax.make_mesh((tp,), ("tp",))
    written = write_hlo(
        out_dir, shard_map_variants(mesh, attention, flash_decode, args, P(), "fd", BUGS)
    )
    split = shard_map_variants(mesh, scaled_attention, split_decode, args, P(), "split", SPLIT_BUGS)
    split["split_baseline"] = split.pop("baseline")
    keepdims = shard_map_variants(
        mesh, scaled_attention, split_decode_keepdims, args, P(), "split_keepdims", ()
    )
    split["split_keepdims"] = keepdims["split_keepdims"]
    lse = shard_map_variants(mesh, scaled_attention, lse_decode, args, P(), "lse", LSE_BUGS)
    split.update({k: v for k, v in lse.items() if k != "baseline"})
    single = [jax.ShapeDtypeStruct(shape, jax.numpy.float32) for shape, _ in args]
    chunked = {
        "chunked": (jax.jit(partial(chunked_decode, chunks=chunks)), single),
        "chunked_lse": (jax.jit(partial(chunked_lse_decode, chunks=chunks)), single),
    }
    for bug in CHUNK_BUGS:
        fn = partial(chunked_decode, chunks=chunks, bug=bug)
        chunked[f"chunked_{bug}"] = (jax.jit(fn), single)
    return {**written, **write_hlo(out_dir, split), **write_hlo(out_dir, chunked)}


def main(argv: list[str] | None = None) -> None:
    export_cli(
        __doc__,
        {"tp": 4, "batch": 2, "heads": 4, "seq": 64, "head_dim": 8, "chunks": 4},
        lambda tp, **_: tp,
        export_all,
        argv,
    )


if __name__ == "__main__":
    main()
