"""A vocab-parallel embedding as XLA's SPMD partitioner writes it: `jax.jit` with the table
sharded over its rows, the per-device module dumped after partitioning, beside the program
on one device. Run in its own process (XLA's flags are read at start-up):

    python tests/xla_partitioned/export.py OUT_DIR
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from partitioner_dump import partitioner_dump  # noqa: E402

OUT, DUMP = partitioner_dump(devices=4)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.sharding import Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402


def embed_then_project(table, ids, w):
    return jnp.take(table, ids, axis=0) @ w


mesh = Mesh(jax.devices(), ("tp",))
args = (jnp.zeros((256, 64)), jnp.zeros((2, 8), jnp.int32), jnp.zeros((64, 32)))
shardings = [NamedSharding(mesh, spec) for spec in (P("tp", None), P(), P())]
jitted = jax.jit(embed_then_project, in_shardings=shardings, out_shardings=shardings[1])
jitted.lower(*args).compile()
baseline = jax.jit(embed_then_project).lower(*args).as_text(dialect="hlo", debug_info=True)
(OUT / "baseline.hlo").write_text(baseline)
(partitioned,) = DUMP.glob("*jit_embed_then_project*after_spmd-partitioning*.txt")
(OUT / "partitioned.hlo").write_text(partitioned.read_text())


def project(x, w):
    return x @ w


# rows split over tp in and out: the per-device module says nothing of its output's layout
rows = NamedSharding(mesh, P("tp", None))
inputs = (jnp.zeros((8, 64)), jnp.zeros((64, 32)))
jax.jit(project, in_shardings=(rows, shardings[1]), out_shardings=rows).lower(*inputs).compile()
(rows_module,) = DUMP.glob("*.jit_project.*after_spmd-partitioning*.txt")
(OUT / "rows.hlo").write_text(rows_module.read_text())
(OUT / "rows_baseline.hlo").write_text(
    jax.jit(project).lower(*inputs).as_text(dialect="hlo", debug_info=True)
)


def rope_half(x, wk):
    """k's heads from a column-parallel projection (one head per device at tp=4), times a
    replicated cos broadcast over the head dim (half of RoPE)."""
    k = (x @ wk).reshape(2, 16, 4, 16)
    positions = jnp.broadcast_to(jnp.arange(16)[None], (2, 16)).astype(jnp.float32)
    cos = jnp.cos(positions[:, :, None] * jnp.ones((8,)))[:, :, None, :]
    return k[..., :8] * cos


rope_inputs = (jnp.zeros((2, 16, 128)), jnp.zeros((128, 64)))
heads = NamedSharding(mesh, P(None, None, "tp", None))
jax.jit(
    rope_half, in_shardings=(shardings[1], NamedSharding(mesh, P(None, "tp"))), out_shardings=heads
).lower(*rope_inputs).compile()
(rope_module,) = DUMP.glob("*.jit_rope_half.*after_spmd-partitioning*.txt")
(OUT / "rope.hlo").write_text(rope_module.read_text())
(OUT / "rope_baseline.hlo").write_text(
    jax.jit(rope_half, out_shardings=heads)
    .lower(*rope_inputs)
    .as_text(dialect="hlo", debug_info=True)
)
