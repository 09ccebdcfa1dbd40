"""A value resharded from one dim to another by XLA's SPMD partitioner: `jax.jit` of an
elementwise chain whose input and output are split over different dims of a mesh of three
axes (fsdp, tp, sp), one module per pair of layouts, dumped after partitioning beside the
module before it. XLA moves the blocks with all-to-alls over a reshape that inserts a unit
dim and splits the dim it hands out. Two more modules as DeepSeek's attention in EasyDeL
writes them: a head built by writing its parts into zeros (`.at[..., :k].set`), and RoPE's
angles from positions counted in floats on each device's block of the sequence. Run in its
own process (XLA's flags are read at start-up):

    python tests/xla_reshards/export.py OUT_DIR
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from partitioner_dump import partitioner_dump  # noqa: E402

OUT, DUMP = partitioner_dump(devices=8)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

MESH = Mesh(np.array(jax.devices()).reshape(2, 2, 2), ("fsdp", "tp", "sp"))
# name -> (the input's layout, the output's): columns to rows and back, over one axis or two
RESHARDS = {
    "columns_to_rows": (P("fsdp", "sp", "tp"), P("fsdp", ("sp", "tp"), None)),
    "rows_to_columns": (P("fsdp", ("sp", "tp"), None), P("fsdp", "sp", "tp")),
    "rows_to_both": (P("fsdp", "sp", "tp"), P("fsdp", None, ("sp", "tp"))),
    "swap": (P("fsdp", None, "tp"), P("fsdp", "tp", None)),
}


def reshard(x, out):
    y = jax.lax.with_sharding_constraint(jnp.sin(x), NamedSharding(MESH, out))
    return jnp.cos(y) * 2


def named(name: str, wanted: P):
    """The reshard to `wanted`, under `name` (the dumped module is named after it)."""

    def fn(x):
        return reshard(x, wanted)

    fn.__name__ = name
    return fn


for name, (given, wanted) in RESHARDS.items():
    x = jnp.ones((2, 16, 32), jnp.float32)
    fn = jax.jit(
        named(name, wanted),
        in_shardings=NamedSharding(MESH, given),
        out_shardings=NamedSharding(MESH, wanted),
    )
    fn.lower(x).compile()
    (before,) = DUMP.glob(f"*jit_{name}.*before_spmd-partitioning*.txt")
    (after,) = DUMP.glob(f"*jit_{name}.*after_spmd-partitioning*.txt")
    (OUT / f"{name}_baseline.hlo").write_text(before.read_text())
    (OUT / f"{name}.hlo").write_text(after.read_text())


def parts_written(nope, pe):
    """Each head's query from its two parts, written into zeros (DeepSeek's MLA)."""
    head = jnp.zeros(nope.shape[:-1] + (nope.shape[-1] + pe.shape[-1],), nope.dtype)
    return head.at[..., : nope.shape[-1]].set(nope).at[..., nope.shape[-1] :].set(pe)


def float_positions(inv_freq):
    """RoPE's angles: positions counted in floats, times the inverse frequencies."""
    return jnp.cos(jnp.einsum("i,j->ij", jnp.arange(64, dtype=jnp.float32), inv_freq))


def positions_two_axes(inv_freq):
    """The same angles, for an output split over two axes (its own module name)."""
    return float_positions(inv_freq)


heads = NamedSharding(MESH, P("fsdp", "tp", "sp", None))
EXTRA = {
    "parts_written": (
        parts_written,
        (jnp.ones((2, 4, 16, 16)), jnp.ones((2, 4, 16, 8))),
        (heads, heads),
        heads,
    ),
    "float_positions": (
        float_positions,
        (jnp.ones((8,)),),
        (NamedSharding(MESH, P()),),
        NamedSharding(MESH, P("tp", None)),
    ),
    # the positions split over sp and tp at once, sp the more significant (the mesh has tp
    # first): each device's offset from a table over the device id, {0, 2, 1, 3, ...} * 16
    "positions_two_axes": (
        positions_two_axes,
        (jnp.ones((8,)),),
        (NamedSharding(MESH, P()),),
        NamedSharding(MESH, P(("sp", "tp"), None)),
    ),
}
for name, (fn, args, given, wanted) in EXTRA.items():
    jax.jit(fn, in_shardings=given, out_shardings=wanted).lower(*args).compile()
    (before,) = DUMP.glob(f"*jit_{name}.*before_spmd-partitioning*.txt")
    (after,) = DUMP.glob(f"*jit_{name}.*after_spmd-partitioning*.txt")
    (OUT / f"{name}_baseline.hlo").write_text(before.read_text())
    (OUT / f"{name}.hlo").write_text(after.read_text())
