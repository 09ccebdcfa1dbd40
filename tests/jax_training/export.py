"""A training step's gradients as JAX writes them: `jax.value_and_grad` of a tensor-parallel
MLP's loss, (1) under `jax.jit` with shardings, the per-device module XLA's partitioner
writes, beside the same step exported with and without the shardings; (2) inside `shard_map`
with the all-reduce written by hand, once as JAX's default (`check_vma=True`, where the
transpose of `psum` leaves the cotangent alone) and once with `check_vma=False`, where the
transpose of `psum` is another `psum` and every gradient comes out `tp` times too large (a
silent bug JAX's users hit when they turn the check off). Run in its own process (XLA's flags
are read at start-up):

    python tests/jax_training/export.py OUT_DIR
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from partitioner_dump import partitioner_dump  # noqa: E402

OUT, DUMP = partitioner_dump(devices=2)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import shard_map  # noqa: E402
from jax.sharding import Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402


def hlo(lowered) -> str:
    return lowered.as_text(dialect="hlo", debug_info=True)


def loss(params, x):
    w1, w2 = params
    return jnp.sum(jnp.square(jax.nn.relu(x @ w1) @ w2))


def local_loss(params, x):
    """The same loss on each device's columns of w1 and rows of w2, all-reduced by hand."""
    w1, w2 = params
    y = jax.lax.psum(jax.nn.relu(x @ w1) @ w2, "tp")
    return jnp.sum(jnp.square(y))


mesh = Mesh(jax.devices(), ("tp",))
args = ((jnp.zeros((16, 32)), jnp.zeros((32, 16))), jnp.zeros((8, 16)))
step = jax.value_and_grad(loss)
(OUT / "baseline.hlo").write_text(hlo(jax.jit(step).lower(*args)))

specs = (P(None, "tp"), P("tp", None))
weights = tuple(NamedSharding(mesh, s) for s in specs)
whole = NamedSharding(mesh, P())
sharded = jax.jit(step, in_shardings=(weights, whole), out_shardings=(whole, weights))
sharded.lower(*args).compile()
(OUT / "annotated_baseline.hlo").write_text(hlo(sharded.lower(*args)))
(module,) = DUMP.glob("*.jit_loss.*after_spmd-partitioning*.txt")
(OUT / "partitioned.hlo").write_text(module.read_text())

for name, check in (("shard_map.hlo", True), ("shard_map_unchecked.hlo", False)):
    by_hand = shard_map(
        jax.value_and_grad(local_loss),
        mesh=mesh,
        in_specs=(specs, P()),
        out_specs=(P(), specs),
        check_vma=check,
    )
    (OUT / name).write_text(hlo(jax.jit(by_hand).lower(*args)))


def mean_loss(params, x):
    """The loss as data-parallel code writes it: the mean over the batch."""
    w1, w2 = params
    return jnp.mean(jnp.square(jax.nn.relu(x @ w1) @ w2))


def data_parallel_step(reduce):
    """Each device's mean loss over its own rows of the batch and its gradients, reduced over
    dp by `reduce` (`jax.lax.pmean` is right; `jax.lax.psum` leaves them dp times too large)."""

    def step(params, x):
        value, grads = jax.value_and_grad(mean_loss)(params, x)
        return jax.lax.pmean(value, "dp"), jax.tree.map(lambda g: reduce(g, "dp"), grads)

    return step


(OUT / "baseline_mean.hlo").write_text(hlo(jax.jit(jax.value_and_grad(mean_loss)).lower(*args)))
dp_mesh = Mesh(jax.devices(), ("dp",))
# With `check_vma=False` (pmap's semantics) each device's gradients are its own and `pmean`
# averages them. With JAX's default `check_vma=True` the gradient of a weight the same on
# every device is already summed over dp by autodiff (the transpose of its implicit
# `pvary`), so the same `pmean` leaves it dp times too large.
for name, reduce, check in (
    ("data_parallel.hlo", jax.lax.pmean, False),
    ("data_parallel_summed.hlo", jax.lax.psum, False),
    ("data_parallel_checked.hlo", jax.lax.pmean, True),
):
    by_device = shard_map(
        data_parallel_step(reduce),
        mesh=dp_mesh,
        in_specs=((P(), P()), P("dp")),
        out_specs=(P(), (P(), P())),
        check_vma=check,
    )
    (OUT / name).write_text(hlo(jax.jit(by_device).lower(*args)))
