"""Shared by the JAX examples: fix the host device count before JAX starts, and write HLO
whose FileNames are repository-relative (JAX's own canonicalisation option; the text is
never edited); the command line and the model import each export.py would repeat."""

from __future__ import annotations

import importlib
import inspect
import math
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]


def set_device_count(count: int) -> None:
    """Give XLA `count` CPU devices; must run before jax is imported."""
    if "jax" in sys.modules:
        raise RuntimeError("jax was imported before XLA_FLAGS could be set")
    flags = os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={count}"
    os.environ["XLA_FLAGS"] = flags.strip()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")


def write_hlo(
    out_dir: Path, variants: dict[str, tuple[Callable[..., Any], list[Any]]]
) -> dict[str, Path]:
    """Lower each `name: (jitted fn, abstract args)` and write `out_dir/name.hlo`."""
    import jax

    strip_root = "^" + re.escape(str(REPO_ROOT) + os.sep)
    old_regex = jax.config.jax_hlo_source_file_canonicalization_regex
    jax.config.update("jax_hlo_source_file_canonicalization_regex", strip_root)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        written: dict[str, Path] = {}
        for name, (fn, args) in variants.items():
            path = out_dir / f"{name}.hlo"
            path.write_text(fn.lower(*args).as_text(dialect="hlo", debug_info=True))
            written[name] = path
    finally:
        jax.config.update("jax_hlo_source_file_canonicalization_regex", old_regex)
    return written


def shard_map_variants(
    mesh: Any,
    baseline: Callable[..., Any],
    body: Callable[..., Any],
    args: list[tuple[tuple[int, ...], Any]],
    out_spec: Any,
    name: str,
    bugs: tuple[str, ...],
) -> dict[str, tuple[Callable[..., Any], list[Any]]]:
    """The baseline on global shapes, and `body` (taking `bug=`) under `jax.shard_map` for the
    correct version (`name`) and each bug (`name_bug`). `args` are (global shape, spec) pairs;
    lowering uses abstract values only, so no weights are allocated.

    check_vma=False: a buggy body breaks the replication its out_specs claim and JAX would
    reject it; proving the claim is Scalify's job. It also keeps every psum a real all-reduce,
    so the variants differ only by their bug."""
    from functools import partial

    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding

    global_args = [jax.ShapeDtypeStruct(shape, jnp.float32) for shape, _ in args]
    local_args = [
        jax.ShapeDtypeStruct(shape, jnp.float32, sharding=NamedSharding(mesh, spec))
        for shape, spec in args
    ]
    in_specs = tuple(spec for _, spec in args)

    def lowered(bug: str | None) -> Callable[..., Any]:
        return jax.jit(
            jax.shard_map(
                partial(body, bug=bug),
                mesh=mesh,
                in_specs=in_specs,
                out_specs=out_spec,
                check_vma=False,
            )
        )

    variants = {"baseline": (jax.jit(baseline), global_args), name: (lowered(None), local_args)}
    for bug in bugs:
        variants[f"{name}_{bug}"] = (lowered(bug), local_args)
    return variants


def example_model(export_file: str) -> ModuleType:
    """The `model.py` beside an example's `export.py`, imported by that name (its folder put
    on sys.path first), for an export run as a script or imported. Call it after
    `set_device_count`: a model imports jax."""
    folder = str(Path(export_file).resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    return importlib.import_module("model")


def export_cli(
    doc: str,
    export: Callable[..., dict[str, Path]],
    devices: tuple[str, ...],
    argv: list[str] | None = None,
) -> None:
    """The command line the examples' export.py share: `--out DIR`, then an integer option for
    each parameter of `export` after the folder (`head_dim` is `--head-dim`, its default the
    parameter's), so the options are written once, in the signature. The device count, the
    product of the `devices` options, is fixed before JAX starts; then `export` is called
    with the options by name, and the files written are printed."""
    import argparse

    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    options = list(inspect.signature(export).parameters.values())[1:]
    for option in options:
        parser.add_argument(f"--{option.name.replace('_', '-')}", type=int, default=option.default)
    args = parser.parse_args(argv)
    values = {option.name: getattr(args, option.name) for option in options}
    set_device_count(math.prod(values[name] for name in devices))
    for path in export(args.out, **values).values():
        print(path)
