"""A vocab-parallel lookup whose index is computed (`max(a, b)`, negative values counted from
the end as the baseline's indexing counts them), not an input: nothing bounds it to the
table's rows, and out of range the whole table's lookup clamps where the masked per-device
lookups give 0 (before the fix this pair was proved, with no assumption stated). Written
beside the same lookup of an input index, which is assumed in range. Run in its own process:

    python tests/lookup_ranges/export.py OUT_DIR
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

OUT = Path(sys.argv[1])
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402
from jax.sharding import Mesh  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

ROWS = 64


def masked(table, index):
    """This device's rows of the table looked up, zero where the index is another's."""
    rows = table.shape[0]
    local = index - lax.axis_index("tp") * rows
    mine = (local >= 0) & (local < rows)
    picked = jnp.take(table, jnp.clip(local, 0, rows - 1), axis=0)
    return lax.psum(jnp.where(mine[:, None], picked, 0.0), "tp")


def wrapped(index):
    """A negative index counted from the end, as the baseline's indexing does."""
    return jnp.where(index < 0, index + ROWS, index)


mesh = Mesh(jax.devices(), ("tp",))
table, a, b = jnp.zeros((ROWS, 8)), jnp.zeros(8, jnp.int32), jnp.zeros(8, jnp.int32)


def export(name, baseline, body, in_specs, *args):
    (OUT / name).mkdir(parents=True, exist_ok=True)
    text = jax.jit(baseline).lower(*args).as_text(dialect="hlo", debug_info=True)
    (OUT / name / "baseline.hlo").write_text(text)
    sharded = jax.shard_map(body, mesh=mesh, in_specs=in_specs, out_specs=P(), check_vma=False)
    text = jax.jit(sharded).lower(*args).as_text(dialect="hlo", debug_info=True)
    (OUT / name / "tp.hlo").write_text(text)


export(
    "computed",
    # no bounds check in the baseline either: an XLA gather, which clamps
    lambda t, a, b: t.at[jnp.maximum(a, b)].get(mode="promise_in_bounds"),
    lambda t, a, b: masked(t, wrapped(jnp.maximum(a, b))),
    (P("tp", None), P(), P()),
    table,
    a,
    b,
)
export(
    "input",
    lambda t, a: jnp.take(t, a, axis=0),
    masked,
    (P("tp", None), P()),
    table,
    a,
)
