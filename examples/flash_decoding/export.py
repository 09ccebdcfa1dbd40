"""Export the flash-decoding step as HLO: the baseline, the correct body, one file a bug;
the same for the split-KV (m, l, o) combine (`split_baseline.hlo`, `split*.hlo`); the
single-device split-KV kernel over KV chunks (`chunked*.hlo`, baseline `split_baseline.hlo`).

Usage: python examples/flash_decoding/export.py --out DIR [--tp 4] [--batch 2] [--heads 4]
       [--seq 64] [--head-dim 8] [--chunks 4]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from hlo_export import example_model, export_cli, shard_map_variants, write_hlo  # noqa: E402


def export_all(
    out_dir: Path,
    tp: int = 4,
    batch: int = 2,
    heads: int = 4,
    seq: int = 64,
    head_dim: int = 8,
    chunks: int = 4,
) -> dict[str, Path]:
    from functools import partial

    import jax
    from jax.sharding import PartitionSpec as P

    model = example_model(__file__)

    kv = (batch, heads, seq, head_dim)
    args = [((batch, heads, head_dim), P()), (kv, P(None, None, "tp")), (kv, P(None, None, "tp"))]
    mesh = jax.make_mesh((tp,), ("tp",))
    written = write_hlo(
        out_dir,
        shard_map_variants(mesh, model.attention, model.flash_decode, args, P(), "fd", model.BUGS),
    )
    split = shard_map_variants(
        mesh, model.scaled_attention, model.split_decode, args, P(), "split", model.SPLIT_BUGS
    )
    split["split_baseline"] = split.pop("baseline")
    keepdims = shard_map_variants(
        mesh, model.scaled_attention, model.split_decode_keepdims, args, P(), "split_keepdims", ()
    )
    split["split_keepdims"] = keepdims["split_keepdims"]
    lse = shard_map_variants(
        mesh, model.scaled_attention, model.lse_decode, args, P(), "lse", model.LSE_BUGS
    )
    split.update({k: v for k, v in lse.items() if k != "baseline"})
    single = [jax.ShapeDtypeStruct(shape, jax.numpy.float32) for shape, _ in args]
    chunked = {
        "chunked": (jax.jit(partial(model.chunked_decode, chunks=chunks)), single),
        "chunked_lse": (jax.jit(partial(model.chunked_lse_decode, chunks=chunks)), single),
    }
    for bug in model.CHUNK_BUGS:
        fn = partial(model.chunked_decode, chunks=chunks, bug=bug)
        chunked[f"chunked_{bug}"] = (jax.jit(fn), single)
    return {**written, **write_hlo(out_dir, split), **write_hlo(out_dir, chunked)}


if __name__ == "__main__":
    export_cli(__doc__, export_all, devices=("tp",))
