"""HLO's general gather and scatter (batching dims, windows, dropped windows): the frontend
reads what JAX emits, and the simulator computes what JAX computes. A gather JAX writes
with a unit dim as a window (one group of a vmapped lookup) reads as the lookup it is."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
from conftest import REPO

from scalify.forms.unit_round_trips import with_round_trip_forms
from scalify.frontends import load_graph
from scalify.simulate.spmd import run_baseline

pytest.importorskip("jax")

PROGRAMS = textwrap.dedent(
    """
    import sys
    import jax, jax.numpy as jnp
    import numpy as np

    out = sys.argv[1]
    rng = np.random.default_rng(0)
    E, C, H, T, K = 4, 3, 5, 6, 2

    def dispatch(x, e, c):  # one group's tokens into (expert, slot); slot C is dropped
        tokens = jnp.broadcast_to(x[:, None, :], (T, K, H))
        return jnp.zeros((E, C, H), x.dtype).at[e, c].add(tokens, mode="drop")

    def combine(y, e, c):
        return y.at[e, c].get(mode="fill", fill_value=0)

    def ints(shape, high):
        return rng.integers(0, high, shape).astype(np.int32)

    programs = {
        "scatter": (jax.vmap(dispatch),
                    [rng.normal(size=(2, T, H)), ints((2, T, K), E), ints((2, T, K), C + 1)]),
        "scatter_set": (  # the update replaces the entry (a combiner returning it)
            lambda b, i, u: b.at[i].set(u, mode="drop"),
            [rng.normal(size=(6, 5)), rng.permutation(6)[:3].astype(np.int32),
             rng.normal(size=(3, 5))],
        ),
        "gather": (jax.vmap(combine),
                   [rng.normal(size=(2, E, C, H)), ints((2, T, K), E), ints((2, T, K), C + 1)]),
        "one_group_take_along": (lambda p, i: jnp.take_along_axis(p, i, axis=2, mode="clip"),
                                 [rng.normal(size=(1, 8, 8)), ints((1, 8, 2), 8)]),
        "one_group_take_along_fill": (  # indices from top_k, as a router's
            lambda p, x: jnp.take_along_axis(p, jax.lax.top_k(x, 2)[1], axis=2),
            [rng.normal(size=(1, 8, 8)), rng.normal(size=(1, 8, 8))],
        ),
        "rows": (lambda t, i: t[i], [rng.normal(size=(5, 1, 3)), ints((4,), 5)]),
        "rows_added": (  # whole rows added at indices, one past the end among them (dropped)
            lambda b, i, u: b.at[i].add(u, mode="drop"),
            [rng.normal(size=(6, 5)), np.array([0, 3, 6, 3], np.int32), rng.normal(size=(4, 5))],
        ),
        "embedding_grad": (  # autograd's scatter-add of a lookup over (batch, seq) tokens
            jax.grad(lambda t, i: jnp.sum(jnp.square(t[i]))),
            [rng.normal(size=(7, 4)), ints((2, 3), 7)],
        ),
    }
    for name, (fn, args) in programs.items():
        args = [a.astype(np.float32) if a.dtype == np.float64 else a for a in args]
        text = jax.jit(fn).lower(*args).as_text(dialect="hlo")
        open(f"{out}/{name}.hlo", "w").write(text)
        np.savez(f"{out}/{name}.npz", *args, want=np.asarray(jax.jit(fn)(*args)))
    """
)


@pytest.fixture(scope="module")
def programs(tmp_path_factory):
    out = tmp_path_factory.mktemp("gather_scatter")
    subprocess.run([sys.executable, "-c", PROGRAMS, str(out)], check=True, cwd=REPO)
    return out


@pytest.mark.parametrize(
    ("name", "op"),
    [
        ("scatter", "scatter"),
        ("scatter_set", "scatter"),
        ("gather", "gather"),
        ("one_group_take_along", "take_along"),
        ("one_group_take_along_fill", "take_along"),
        ("rows", "take"),
        ("rows_added", "dot"),  # one_hot(i)^T u: a scatter-add of whole rows
        ("embedding_grad", "dot"),
    ],
)
def test_simulated_like_jax(programs, name, op):
    graph = load_graph(str(programs / f"{name}.hlo"))
    assert op in {n.op for n in graph.nodes.values()}
    data = np.load(programs / f"{name}.npz")
    args = [data[f"arr_{k}"] for k in range(len(graph.inputs))]
    got = run_baseline(graph, dict(zip(graph.inputs, args, strict=True)))[graph.outputs[0]]
    np.testing.assert_allclose(got, data["want"], rtol=1e-6, atol=1e-6)


def test_one_group_bounds_check_gets_a_form_without_unit_dim_views(programs):
    """JAX views the one-group indices without the group dim and back around its bounds
    check; the folded form, added as an equal value, checks the indices as they are, as
    with many groups."""
    graph = with_round_trip_forms(load_graph(str(programs / "one_group_take_along_fill.hlo")))
    folded = [
        (graph.node(a), graph.node(b))
        for a, b in graph.equalities
        if graph.node(a).op in ("merge", "split") and graph.node(b).op == "and"
    ]
    assert [(view.shape, form.shape) for view, form in folded] == [((1, 8, 2), (1, 8, 2))]


def test_a_scatter_that_sets_entries_replaces_them(programs):
    graph = load_graph(str(programs / "scatter_set.hlo"))
    (scatter,) = [n for n in graph.nodes.values() if n.op == "scatter"]
    assert scatter.attrs["op"] == "replace"


@pytest.mark.parametrize("name", ["rows_added", "embedding_grad"])
def test_a_scatter_adding_whole_rows_is_a_one_hot_product(programs, name):
    """The embedding gradient's scatter-add is `x + one_hot(i)^T u`, the form the one-hot
    rules read (a device's rows of a vocab-parallel table, tests/corpus B33); a scatter of
    other windows (`scatter` above, into (expert, slot) pairs) stays a scatter."""
    graph = load_graph(str(programs / f"{name}.hlo"))
    ops = {n.op for n in graph.nodes.values()}
    assert "scatter" not in ops and "dot" in ops
