"""Export the silent-bug corpus as HLO: per entry, the baseline, the fixed and the buggy body.

Usage: python tests/corpus/export.py --out DIR [--only B09,B14]

Writes DIR/<id>/baseline.hlo, fixed.hlo and buggy.hlo, and DIR/manifest.json with each
entry's metadata (no functions), so a test can read it without importing JAX.
"""

from __future__ import annotations

import argparse
import json
import sys
from functools import partial
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "examples"))

from hlo_export import set_device_count, write_hlo  # noqa: E402

DEVICES = 8
METADATA = (
    "id",
    "title",
    "link",
    "bug_class",
    "mesh",
    "out_spec",
    "out_specs",
    "bug",
    "expected_fixed",
    "why_unknown",
    "expected_buggy",
    "why_missed",
)


def out_specs(entry: dict):
    """`out_spec` for one output; `out_specs` (a list of specs) for a tuple of outputs."""
    from jax.sharding import PartitionSpec as P

    if "out_specs" in entry:
        return tuple(P(*spec) for spec in entry["out_specs"])
    return P(*entry["out_spec"])


def export_all(out_dir: Path, only: set[str] | None = None) -> list[dict]:
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    sys.path.insert(0, str(HERE))
    from bugs import ENTRIES

    manifest = []
    for entry in ENTRIES:
        if only and entry["id"] not in only:
            continue
        mesh = jax.make_mesh(tuple(entry["mesh"].values()), tuple(entry["mesh"]))
        args = entry["args"].values()
        global_args = [jax.ShapeDtypeStruct(s, jnp.dtype(t)) for s, _, t in args]
        local_args = [
            jax.ShapeDtypeStruct(s, jnp.dtype(t), sharding=NamedSharding(mesh, P(*spec)))
            for s, spec, t in args
        ]

        def body(bug: bool, entry=entry, mesh=mesh):
            return jax.jit(
                jax.shard_map(
                    partial(entry["body"], bug=bug),
                    mesh=mesh,
                    in_specs=tuple(P(*spec) for _, spec, _ in entry["args"].values()),
                    out_specs=out_specs(entry),
                    check_vma=False,
                )
            )

        write_hlo(
            out_dir / entry["id"],
            {
                "baseline": (jax.jit(entry["baseline"]), global_args),
                "fixed": (body(False), local_args),
                "buggy": (body(True), local_args),
            },
        )
        meta = {k: entry[k] for k in METADATA if k in entry}
        meta.setdefault("expected_fixed", "equivalent")
        manifest.append(meta)
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return manifest


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--only", default="", help="comma-separated ids, e.g. B09,B14")
    a = ap.parse_args(argv)
    set_device_count(DEVICES)
    only = {i.strip() for i in a.only.split(",") if i.strip()} or None
    for meta in export_all(a.out, only):
        print(a.out / meta["id"])


if __name__ == "__main__":
    main()
