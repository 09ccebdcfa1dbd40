"""Shared by the tests/*/export.py scripts that keep what XLA's SPMD partitioner writes: the
output folder named on their command line, and XLA's flags set (before JAX starts: XLA reads
them once) to dump every module after partitioning into it."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def partitioner_dump(devices: int) -> tuple[Path, Path]:
    """OUT_DIR (the script's one argument) and OUT_DIR/dump, where XLA, on `devices` host CPU
    devices, writes each module after SPMD partitioning. Call before jax is imported."""
    if "jax" in sys.modules:
        raise RuntimeError("jax was imported before XLA_FLAGS could be set")
    out = Path(sys.argv[1])
    dump = out / "dump"
    os.environ["XLA_FLAGS"] = (
        f"--xla_force_host_platform_device_count={devices} --xla_dump_to={dump} "
        "--xla_dump_hlo_pass_re=spmd-partitioning"
    )
    return out, dump
