"""HLO frontend tests on real HLO: modules JAX prints for small models written here, and the
reference samples (JAX lowered/compiled, XLA SPMD pass dumps, torch-xla)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest

from scalify.errors import ScalifyError
from scalify.frontends.hlo import load_hlo, parse_hlo
from scalify.frontends.hlo_attributes import _Array, _groups, _hlo_sharding, _leaves
from scalify.ir import Graph, Node, TileSharding
from scalify.ops import CANONICAL_OPS

SAMPLES = Path(__file__).resolve().parents[2] / "shared" / "reference" / "hlo-samples"

# Runs in a subprocess: XLA_FLAGS must be set before jax is imported, and must not leak into
# the test process. `# @LINE:<tag>` marks source lines whose numbers the tests check.
JAX_SCRIPT = textwrap.dedent(
    """
    import os
    import sys

    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
    import jax
    import jax.numpy as jnp
    from jax.sharding import AxisType, NamedSharding
    from jax.sharding import PartitionSpec as P

    out = sys.argv[1]


    def write(name, text):
        with open(os.path.join(out, name), "w") as f:
            f.write(text)


    def helper(h):
        return jax.nn.relu(h)  # @LINE:relu


    def mlp(x, w1, w2):
        h = x @ w1  # @LINE:dot1
        h = jax.jit(helper)(h)
        return (h @ w2).sum(axis=1), jnp.max(h)  # @LINE:dot2


    x = jnp.ones((8, 16))
    w1 = jnp.ones((16, 32))
    w2 = jnp.ones((32, 4))
    write("mlp.hlo", jax.jit(mlp).lower(x, w1, w2).as_text(dialect="hlo", debug_info=True))

    mesh = jax.make_mesh((2, 4), ("dp", "tp"), axis_types=(AxisType.Explicit,) * 2)


    def tp_body(x, w1, w2):
        h = jax.nn.gelu(x @ w1)
        return jax.lax.psum(h @ w2, "tp")  # @LINE:psum


    specs = (P("dp", None), P(None, "tp"), P("tp", None))
    tp = jax.jit(jax.shard_map(tp_body, mesh=mesh, in_specs=specs, out_specs=P("dp", None)))
    shapes = ((16, 64), (64, 256), (256, 64))
    args = [
        jax.ShapeDtypeStruct(s, jnp.float32, sharding=NamedSharding(mesh, p))
        for s, p in zip(shapes, specs)
    ]
    lowered = tp.lower(*args)
    write("tp.hlo", lowered.as_text(dialect="hlo", debug_info=True))
    write("tp.compiled.hlo", lowered.compile().as_text())


    def zoo(x):
        a = jax.lax.psum(x, "tp")
        b = jax.lax.all_gather(x, "tp", axis=0, tiled=True)
        c = jax.lax.psum_scatter(x, "tp", scatter_dimension=1, tiled=True)
        d = jax.lax.all_to_all(x, "tp", 1, 0, tiled=True)
        e = jax.lax.ppermute(x, "tp", [(i, (i + 1) % 4) for i in range(4)])
        f = jax.lax.pmax(x, ("dp", "tp"))
        return a, b, c, d, e, f


    zoo_fn = jax.jit(
        jax.shard_map(
            zoo, mesh=mesh, in_specs=P("dp", "tp"), out_specs=P("dp", "tp"), check_vma=False
        )
    )
    spec = jax.ShapeDtypeStruct((16, 64), jnp.float32, sharding=NamedSharding(mesh, P("dp", "tp")))
    write("zoo.hlo", zoo_fn.lower(spec).as_text(dialect="hlo", debug_info=True))


    def misc(x, i):
        return (
            jax.lax.reduce(x, 1.0, jax.lax.add, (0,)),
            jnp.min(x, axis=0),
            jnp.prod(x, axis=1),
            jnp.max(i * jnp.arange(8)),
            jnp.argmax(x, axis=0),
            x[1:3, ::2],
            jax.lax.dynamic_slice(x, (i, 0), (2, 4)),
            jnp.pad(x, ((1, 2), (0, 1))),
            jnp.concatenate([x, x], axis=1),
            jnp.where(x > 0.5, x, -x).T,
            x.astype(jnp.bfloat16),
            jnp.einsum("bij,bjk->bik", x.reshape(2, 4, 8), x.reshape(2, 8, 4)),
        )


    write("misc.hlo", jax.jit(misc).lower(jnp.ones((8, 8)), 3).as_text(dialect="hlo"))

    # jit + NamedSharding, compiled: XLA's partitioner writes mesh-axes replica groups.
    auto = jax.make_mesh((2, 4), ("dp", "tp"), axis_types=(AxisType.Auto,) * 2)


    def partial_sums(x, y):
        return x.sum(axis=0), y * 2


    out_shardings = (NamedSharding(auto, P("tp")), NamedSharding(auto, P()))
    fn = jax.jit(partial_sums, out_shardings=out_shardings)
    xs = jax.ShapeDtypeStruct((16, 64), jnp.float32, sharding=NamedSharding(auto, P("dp", "tp")))
    ys = jax.ShapeDtypeStruct((16, 64), jnp.float32, sharding=NamedSharding(auto, P(None, "tp")))
    write("auto.compiled.hlo", fn.lower(xs, ys).compile().as_text())
    """
)


@pytest.fixture(scope="module")
def jax_hlo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Real HLO printed by JAX for the models in JAX_SCRIPT (one subprocess for all)."""
    pytest.importorskip("jax")
    out = tmp_path_factory.mktemp("hlo")
    script = out / "models.py"
    script.write_text(JAX_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["JAX_PLATFORMS"] = "cpu"
    proc = subprocess.run(
        [sys.executable, str(script), str(out)], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def script_line(tag: str) -> int:
    lines = JAX_SCRIPT.splitlines()
    return next(i + 1 for i, line in enumerate(lines) if f"# @LINE:{tag}" in line)


def ops(graph: Graph) -> Counter[str]:
    return Counter(n.op for n in graph.nodes.values())


def of_op(graph: Graph, op: str) -> list[Node]:
    return [n for n in graph.nodes.values() if n.op == op]


def check_well_formed(graph: Graph) -> None:
    """IR invariants every loaded graph must satisfy."""
    ids = list(graph.nodes)
    assert ids == sorted(ids)
    for node in graph.nodes.values():
        assert node.op in CANONICAL_OPS, node
        assert all(o < node.id for o in node.operands), node  # topological
        assert isinstance(node.shape, tuple) and all(isinstance(d, int) for d in node.shape)
        if node.op == "opaque":
            assert "hlo_op" in node.attrs
    reachable: set[int] = set()
    stack = list(graph.outputs)
    while stack:
        n = stack.pop()
        if n not in reachable:
            reachable.add(n)
            stack.extend(graph.nodes[n].operands)
    assert reachable == set(graph.nodes), "dead nodes left"
    params = [n.id for n in graph.nodes.values() if n.op == "parameter"]
    assert sorted(graph.inputs) == sorted(params)
    indices = [graph.nodes[i].attrs["index"] for i in graph.inputs]
    assert indices == sorted(indices)


# ---------------------------------------------------------------------------------------------
# JAX-generated modules


def test_jit_mlp_debug_info(jax_hlo: Path) -> None:
    g = load_hlo(jax_hlo / "mlp.hlo")
    check_well_formed(g)
    assert [g.input_name(i) for i in g.inputs] == ["x", "w1", "w2"]
    assert [g.nodes[i].shape for i in g.inputs] == [(8, 16), (16, 32), (32, 4)]
    assert len(g.outputs) == 2
    assert ops(g) == Counter(
        {"parameter": 3, "dot": 2, "constant": 1, "broadcast": 1, "max": 1, "reduce": 2}
    )
    dot1, dot2 = of_op(g, "dot")
    assert dot1.attrs == {
        "lhs_contracting": (1,),
        "rhs_contracting": (0,),
        "lhs_batch": (),
        "rhs_batch": (),
    }
    assert dot1.loc is not None and dot1.loc.line == script_line("dot1")
    assert dot1.loc.file.endswith("models.py") and dot1.loc.function == "mlp"
    assert dot2.loc is not None and dot2.loc.line == script_line("dot2")
    assert dot1.framework_op.endswith("dot_general")
    # The relu body came through a `call`: inlined; its nodes inherit the call's location.
    (relu,) = of_op(g, "max")
    assert relu.loc is not None and relu.loc.function == "helper"
    assert relu.loc.line == script_line("relu")
    # Reductions: identity init values (0 for sum, -inf for max) are dropped.
    total, peak = (g.nodes[o] for o in g.outputs)
    assert total.op == "reduce" and total.attrs == {"dims": (1,), "op": "sum"}
    assert total.operands == (dot2.id,)
    assert peak.attrs == {"dims": (0, 1), "op": "max"} and peak.operands == (relu.id,)


def test_shard_map_tp_mlp(jax_hlo: Path) -> None:
    g = load_hlo(jax_hlo / "tp.hlo")
    check_well_formed(g)
    assert g.mesh_hint == {"dp": 2, "tp": 4}
    assert not g.opaque_nodes()
    x, w1, w2 = g.inputs
    assert [g.input_name(i) for i in g.inputs] == ["x", "w1", "w2"]
    assert [g.nodes[i].attrs["index"] for i in g.inputs] == [0, 1, 2]
    # Inputs carry their LOCAL shapes and the shard_map in_specs.
    assert g.nodes[x].shape == (8, 64)
    assert g.nodes[w1].shape == (64, 64)
    assert g.nodes[w2].shape == (64, 64)
    assert g.input_shardings[x] == TileSharding(tiles=(2, 1), axes=(("dp",), ()))
    assert g.input_shardings[w1] == TileSharding(tiles=(1, 4), axes=((), ("tp",)))
    assert g.input_shardings[w2] == TileSharding(tiles=(4, 1), axes=(("tp",), ()))
    (ar,) = of_op(g, "all_reduce")
    assert ar.attrs == {"groups": ((0, 1, 2, 3), (4, 5, 6, 7)), "op": "sum"}
    assert ar.loc is not None and ar.loc.line == script_line("psum")
    assert g.outputs == [ar.id]
    assert g.output_shardings == {ar.id: TileSharding(tiles=(2, 1), axes=(("dp",), ()))}
    assert ops(g)["dot"] == 2 and ops(g)["tanh"] == 1


def test_shard_map_compiled_module(jax_hlo: Path) -> None:
    """The per-device program after XLA's optimisations: fusions inlined, layouts ignored."""
    g = load_hlo(jax_hlo / "tp.compiled.hlo")
    check_well_formed(g)
    lowered = load_hlo(jax_hlo / "tp.hlo")
    assert g.num_partitions == 8
    assert not g.opaque_nodes()
    assert ops(g)["dot"] == 2 and ops(g)["all_reduce"] == 1 and ops(g)["tanh"] == 1
    assert [g.nodes[i].shape for i in g.inputs] == [lowered.nodes[i].shape for i in lowered.inputs]
    tiles = [g.input_shardings[i].tiles for i in g.inputs]
    assert tiles == [(2, 1), (1, 4), (4, 1)]  # from sharding={devices=[...]... replicate}
    (ar,) = of_op(g, "all_reduce")
    assert ar.attrs["groups"] == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert all(n.loc is not None for n in of_op(g, "dot"))


def test_collectives_zoo(jax_hlo: Path) -> None:
    g = load_hlo(jax_hlo / "zoo.hlo")
    check_well_formed(g)
    tp_groups = ((0, 1, 2, 3), (4, 5, 6, 7))
    (x,) = g.inputs
    assert g.nodes[x].shape == (8, 16)
    assert g.input_shardings[x] == TileSharding(tiles=(2, 4), axes=(("dp",), ("tp",)))
    outs = [g.nodes[o] for o in g.outputs]
    assert len(outs) == 6
    psum, gather, scatter, a2a_out, permute, pmax = outs
    assert psum.op == "all_reduce" and psum.attrs == {"groups": tp_groups, "op": "sum"}
    assert gather.op == "all_gather" and gather.attrs == {"groups": tp_groups, "dim": 0}
    assert gather.shape == (32, 16)
    assert scatter.op == "reduce_scatter"
    assert scatter.attrs == {"groups": tp_groups, "op": "sum", "dim": 1}
    assert scatter.shape == (8, 4)
    (a2a,) = of_op(g, "all_to_all")
    assert a2a.attrs == {"groups": tp_groups, "dim": 1} and a2a.operands == (x,)
    assert a2a_out.op == "reshape" and a2a_out.shape == (32, 4)
    assert permute.op == "collective_permute"
    assert permute.attrs == {
        "pairs": ((0, 1), (1, 2), (2, 3), (3, 0), (4, 5), (5, 6), (6, 7), (7, 4))
    }
    assert pmax.op == "all_reduce" and pmax.attrs == {"groups": (tuple(range(8)),), "op": "max"}
    assert all(o.operands == (x,) for o in (psum, gather, scatter, permute, pmax))
    for node in outs:
        assert g.output_shardings[node.id].axes == (("dp",), ("tp",))


def test_misc_ops(jax_hlo: Path) -> None:
    g = load_hlo(jax_hlo / "misc.hlo")
    check_well_formed(g)
    outs = [g.nodes[o] for o in g.outputs]
    red1, mn, prod, imax, argmax, sl, dsl, pad, cat, tr, cvt, bdot = outs
    init = g.nodes[red1.operands[1]]  # init 1.0 is not the identity of sum: kept
    assert red1.attrs == {"dims": (0,), "op": "sum"} and init.attrs == {"value": "1"}
    assert mn.attrs == {"dims": (0,), "op": "min"} and len(mn.operands) == 1  # +inf dropped
    assert prod.attrs == {"dims": (1,), "op": "prod"} and len(prod.operands) == 1
    assert imax.attrs == {"dims": (0,), "op": "max"} and len(imax.operands) == 1  # s32 lowest
    assert imax.dtype == "s32"
    assert argmax.op == "opaque" and argmax.attrs["hlo_op"] == "reduce"  # variadic reduce
    assert sl.attrs == {"starts": (1, 0), "limits": (3, 8), "strides": (1, 2)}
    assert dsl.op == "dynamic_slice" and dsl.attrs == {"sizes": (2, 4)} and len(dsl.operands) == 3
    assert pad.attrs == {"padding": "1_2x0_1"} and pad.shape == (11, 9)
    assert cat.attrs == {"dim": 1} and cat.operands == (g.inputs[0],) * 2
    assert tr.op == "transpose" and tr.attrs == {"perm": (1, 0)}
    select = g.nodes[tr.operands[0]]
    assert select.op == "select" and g.nodes[select.operands[0]].attrs == {"direction": "GT"}
    assert cvt.op == "convert" and cvt.attrs == {"dtype": "bf16"} and cvt.dtype == "bf16"
    assert bdot.attrs["lhs_batch"] == (0,) and bdot.attrs["rhs_contracting"] == (1,)
    assert any(n.op == "iota" and n.attrs == {"dim": 0} for n in g.nodes.values())


def test_partitioner_mesh_replica_groups(jax_hlo: Path) -> None:
    """`replica_groups=mesh['axis_0'=2,'axis_1'=4] {'axis_0'}` and the `device_ids=` variant."""
    g = load_hlo(jax_hlo / "auto.compiled.hlo")
    check_well_formed(g)
    assert g.num_partitions == 8
    total, doubled = (g.nodes[o] for o in g.outputs)
    assert total.op == "all_reduce" and total.shape == (16,)
    assert total.attrs == {"groups": ((0, 4), (1, 5), (2, 6), (3, 7)), "op": "sum"}  # over dp
    local_sum = g.nodes[total.operands[0]]
    assert local_sum.op == "reduce" and local_sum.attrs == {"dims": (0,), "op": "sum"}
    assert local_sum.operands == (g.inputs[0],)
    assert doubled.op == "all_gather" and doubled.shape == (16, 64)
    assert doubled.attrs == {"groups": ((0, 1, 2, 3), (4, 5, 6, 7)), "dim": 1}  # over tp
    assert [g.input_shardings[i].tiles for i in g.inputs] == [(2, 4), (1, 4)]


# ---------------------------------------------------------------------------------------------
# Reference samples

needs_samples = pytest.mark.skipif(not SAMPLES.is_dir(), reason="reference samples absent")


@needs_samples
@pytest.mark.parametrize(
    "name", sorted(p.name for p in SAMPLES.glob("*.hlo")) if SAMPLES.is_dir() else []
)
def test_every_sample_parses(name: str) -> None:
    g = load_hlo(SAMPLES / name)
    check_well_formed(g)
    assert g.outputs and g.inputs


@needs_samples
def test_torch_xla_sample() -> None:
    g = load_hlo(SAMPLES / "torch_xla_tp_mlp.rank0.hlo")
    # The token parameter p0 only feeds the tuple all-reduce's unused element: pruned.
    assert [g.input_name(i) for i in g.inputs] == ["p1", "p2", "p3"]
    assert [g.nodes[i].attrs["index"] for i in g.inputs] == [1, 2, 3]
    (ar,) = of_op(g, "all_reduce")
    assert ar.attrs == {"groups": (), "op": "sum"}
    assert g.outputs == [ar.id]
    dot5, dot17 = of_op(g, "dot")
    assert ar.operands == (dot17.id,)
    assert dot5.loc is not None and (dot5.loc.file, dot5.loc.line) == ("examples/t2.py", 13)
    assert dot5.framework_op == "aten__mm"
    assert ops(g)["erf"] == 1 and ops(g)["mul"] == 3


@needs_samples
def test_spmd_partitioner_dumps() -> None:
    after = load_hlo(SAMPLES / "spmd2d_mlp.after_spmd_partitioning.hlo")
    assert after.num_partitions == 8
    assert [after.input_name(i) for i in after.inputs] == ["x", "w1", "w2"]
    shardings = [after.input_shardings[i] for i in after.inputs]
    assert [s.tiles for s in shardings] == [(2, 1), (1, 4), (4, 1)]
    # devices of each tile, row-major: w1's blocks follow the tp coordinate of a (dp, tp) mesh
    assert shardings[0].devices == tuple(range(8)) and shardings[0].device_grid == (2, 1, 4)
    assert shardings[1].devices == (0, 4, 1, 5, 2, 6, 3, 7)
    assert shardings[1].device_grid == (1, 4, 2)
    (ar,) = of_op(after, "all_reduce")
    assert ar.attrs == {"groups": ((0, 1, 2, 3), (4, 5, 6, 7)), "op": "sum"}
    dot = of_op(after, "dot")[0]
    assert dot.loc is not None and str(dot.loc) == "dump2.py:10 (mlp)"
    before = load_hlo(SAMPLES / "spmd2d_mlp.before_spmd_partitioning.hlo")
    assert [before.nodes[i].shape for i in before.inputs] == [(16, 64), (64, 256), (256, 64)]
    assert [s.tiles for s in before.output_shardings.values()] == [(2, 1)]


@needs_samples
def test_shardy_lowered_samples() -> None:
    tp = load_hlo(SAMPLES / "tp_mlp.lowered.hlo")
    assert tp.mesh_hint == {"tp": 8}
    x, w1, w2 = tp.inputs
    assert tp.input_shardings[x] == TileSharding((1, 1), ((), ()), replicated=True)
    assert tp.input_shardings[w1] == TileSharding((1, 8), ((), ("tp",)))
    assert tp.nodes[w1].shape == (64, 32) and tp.input_name(w1) == "w1_shard"
    zoo = load_hlo(SAMPLES / "collectives_zoo.lowered.hlo")
    assert [zoo.output_shardings[o].tiles for o in zoo.outputs] == [(1, 8), (8, 1, 1), (8, 1)]
    compiled = load_hlo(SAMPLES / "tp_mlp.hlo")
    assert compiled.input_shardings[compiled.inputs[0]] == TileSharding((1, 1), replicated=True)
    assert not compiled.opaque_nodes()


@needs_samples
def test_stack_frame_parents_and_library_frames() -> None:
    """Printed parent_frame_id is one above the parent's frame number (1 = no parent).

    In tp_mlp.hlo, frame 10 (the second dot) -> location 5 (tp_body:21), parent printed as 3,
    i.e. frame 2 (dump:36), whose parent is frame 1 (<module>:51). Moving location 5 into a
    library file must make the dot point at the next user frame up that chain.
    """
    text = (SAMPLES / "tp_mlp.hlo").read_text()
    g = parse_hlo(text, "tp_mlp.hlo")
    dot = [n for n in of_op(g, "dot") if n.name == "dot_general.8"][0]
    assert str(dot.loc) == "dump_hlo.py:21 (tp_body)"
    lib = "/venv/lib/python3.11/site-packages/jax/_src/numpy/lax_numpy.py"
    edited = text.replace('1 "dump_hlo.py"\n', f'1 "dump_hlo.py"\n2 "{lib}"\n').replace(
        "5 {file_name_id=1 ", "5 {file_name_id=2 "
    )
    g = parse_hlo(edited, "tp_mlp.hlo")
    dot = [n for n in of_op(g, "dot") if n.name == "dot_general.8"][0]
    assert str(dot.loc) == "dump_hlo.py:36 (dump)"


def test_attribute_parsers() -> None:
    assert _groups("{}") == ()
    assert _groups("{{0,1},{2,3}}") == ((0, 1), (2, 3))
    assert _groups("[2,4]<=[8]") == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert _groups("[4,2]<=[2,4]T(1,0)") == ((0, 4), (1, 5), (2, 6), (3, 7))
    assert _groups("[2,4]<=[2,2,2]T(2,1,0)") == ((0, 4, 2, 6), (1, 5, 3, 7))
    assert _groups("mesh['x'=8] {'x':(2)2}") == ((0, 2), (1, 3), (4, 6), (5, 7))  # sub-axis
    assert _groups("mesh['a'=2,'b'=4] {'b','a'}") == ((0, 4, 1, 5, 2, 6, 3, 7),)
    from scalify.frontends.hlo_syntax import _array_of

    class Tok(str):
        pass

    shape = _array_of(Tok("f32[16,64]{1,0}"))
    assert _leaves(shape, _Array)[0].dims == (16, 64)
    assert _hlo_sharding("{devices=[1,4,2]<=[2,4]T(1,0) last_tile_dim_replicate}", shape) == [
        TileSharding(tiles=(1, 4), devices=(0, 4, 1, 5, 2, 6, 3, 7), device_grid=(1, 4, 2))
    ]
    assert _hlo_sharding("{devices=[2,2]3,2,1,0}", shape)[0].devices == (3, 2, 1, 0)
    assert _hlo_sharding("{replicated}", shape) == [TileSharding((1, 1), replicated=True)]
    assert _hlo_sharding("{maximal device=0}", shape) == [None]


# ---------------------------------------------------------------------------------------------
# Bad input: only ScalifyError, pointing at the right line


def test_truncated_file(jax_hlo: Path) -> None:
    text = (jax_hlo / "tp.hlo").read_text()
    cut = text.index("lhs_contracting_dims={") + len("lhs_contracting_dims={")
    line = text.count("\n", 0, cut) + 1
    with pytest.raises(ScalifyError) as info:
        parse_hlo(text[:cut], "tp.hlo")
    err = info.value
    assert err.line == line and err.path == "tp.hlo"
    assert err.message.startswith("expected one of ") and "found end of input" in err.message
    assert err.source_line == text.splitlines()[line - 1][: len(err.source_line)]


def test_truncation_anywhere_raises_only_scalify_errors(jax_hlo: Path) -> None:
    text = (jax_hlo / "zoo.hlo").read_text()
    n_lines = text.count("\n") + 1
    for cut in range(0, len(text), 97):
        try:
            parse_hlo(text[:cut], "zoo.hlo")
        except ScalifyError as err:
            assert 1 <= err.line <= n_lines, (cut, err.render())
            assert err.render()


def test_undefined_operand(jax_hlo: Path) -> None:
    text = (jax_hlo / "mlp.hlo").read_text()
    lines = text.splitlines()
    target = next(i for i, line in enumerate(lines) if " dot(x.1, w1.1)" in line)
    lines[target] = lines[target].replace("dot(x.1, w1.1)", "dot(x.1, nosuch.7)")
    with pytest.raises(ScalifyError) as info:
        parse_hlo("\n".join(lines), "mlp.hlo")
    err = info.value
    assert err.line == target + 1
    assert "nosuch.7" in err.message
    assert lines[target][err.column - 1 :].startswith("nosuch.7")


@pytest.mark.parametrize(
    "text, line",
    [("", 1), ("\n\n   \n", 1), ("HloModule m\n\nENTRY e {\n  x = f32[] constant(0) $$\n}", 4)],
)
def test_empty_and_garbage(text: str, line: int) -> None:
    with pytest.raises(ScalifyError) as info:
        parse_hlo(text, "bad.hlo")
    assert info.value.line == line


def test_no_entry(jax_hlo: Path) -> None:
    text = (jax_hlo / "mlp.hlo").read_text().replace("ENTRY ", "")
    with pytest.raises(ScalifyError, match="no ENTRY"):
        parse_hlo(text, "mlp.hlo")


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ScalifyError):
        load_hlo(tmp_path / "absent.hlo")


# ---------------------------------------------------------------------------------------------
# Speed


BIG_SCRIPT = textwrap.dedent(
    """
    import sys
    import jax
    import jax.numpy as jnp

    def f(x, ws):
        for i in range(4000):
            h = jnp.tanh(x @ ws[i % 4]) * 0.5 + x
            x = jax.nn.gelu(h) - jnp.max(h, axis=1, keepdims=True)
        return x.sum()

    args = (jnp.ones((8, 16)), [jnp.ones((16, 16))] * 4)
    text = jax.jit(f).lower(*args).as_text(dialect="hlo", debug_info=True)
    open(sys.argv[1], "w").write(text)
    """
)


@pytest.mark.slow
def test_large_module_is_linear(tmp_path: Path) -> None:
    pytest.importorskip("jax")
    path = tmp_path / "big.hlo"
    script = tmp_path / "big.py"
    script.write_text(BIG_SCRIPT)
    subprocess.run([sys.executable, str(script), str(path)], check=True, capture_output=True)
    assert path.read_text().count("\n") > 90_000
    start = time.perf_counter()
    g = load_hlo(path)
    elapsed = time.perf_counter() - start
    assert len(g.nodes) > 70_000
    assert elapsed < 30, elapsed


CONDITIONAL = """\
HloModule cond
double {
  a = f32[4] parameter(0)
  ROOT d = f32[4] add(a, a)
}
negated {
  b = f32[4] parameter(0)
  ROOT n = f32[4] negate(b)
}
shifted {
  c = f32[4] parameter(0)
  one = f32[] constant(1)
  ones = f32[4] broadcast(one), dimensions={}
  ROOT s = f32[4] add(c, ones)
}
ENTRY main {
  x = f32[4] parameter(0)
  i = s32[] parameter(1)
  p = pred[] parameter(2)
  by_index = f32[4] conditional(i, x, x, x), branch_computations={double, negated, shifted}
  ROOT r = f32[4] conditional(p, by_index, x), true_computation=negated, false_computation=double
}
"""


@pytest.mark.parametrize("index", [-1, 0, 1, 2, 5])
@pytest.mark.parametrize("flag", [True, False])
def test_a_conditional_is_the_branch_its_index_or_predicate_picks(index, flag):
    """Every branch lowered, the result picked as HLO picks it: the predicate's true branch,
    the index's branch, the last one for an index out of range."""
    import numpy as np

    from scalify.simulate.spmd import run_baseline

    graph = parse_hlo(CONDITIONAL, "cond.hlo")
    assert not graph.opaque_nodes()
    x = np.array([1.0, -2.0, 3.0, 0.5])
    inputs = (x, np.array(index), np.array(flag))
    values = run_baseline(graph, dict(zip(graph.inputs, inputs, strict=True)))
    branch = {0: x + x, 1: -x}.get(index, x + 1.0)
    expected = -branch if flag else x + x
    np.testing.assert_allclose(values[graph.outputs[0]], expected)


def test_complex_literals_are_read_and_simulated() -> None:
    """`c64[] constant((0, 1))` (JAX's `1j`, Llama 4's RoPE by complex rotation) is a literal
    of both parts; a complex array literal is a list of such pairs. The simulator keeps both
    parts."""
    from scalify.simulate.kernels import apply

    text = (
        "HloModule m\n"
        "ENTRY main {\n"
        "  x = c64[2] parameter(0)\n"
        "  i = c64[] constant((0, 1))\n"
        "  b = c64[2] broadcast(i), dimensions={}\n"
        "  t = c64[2] constant({(1, 0), (0, -2.5)})\n"
        "  m = c64[2] multiply(x, b)\n"
        "  ROOT y = c64[2] add(m, t)\n"
        "}\n"
    )
    g = parse_hlo(text, "complex.hlo")
    i = next(n for n in g.nodes.values() if n.name == "i")
    t = next(n for n in g.nodes.values() if n.name == "t")
    assert apply(i, [], []).item() == 1j
    assert list(apply(t, [], [])) == [1 + 0j, -2.5j]


# ---------------------------------------------------------------------------------------------
# Comments: `//` to the end of the line and `/* */`, as XLA's own parser accepts them


def _commented(text: str) -> str:
    """`text` with a comment on every line, one inside each operand list and attribute
    list, and a block comment over several lines before the ENTRY computation."""
    lines = []
    for i, line in enumerate(text.splitlines()):
        parts = line.split('"')  # even parts are outside strings (these have no `\"`)
        for j in range(0, len(parts), 2):
            parts[j] = parts[j].replace("(", "( /* ( */ ").replace("), ", "), /* , */ ")
        lines.append('"'.join(parts) + f" // line {i} /* not a block */")
    body = "\n".join(lines)
    return body.replace("\nENTRY", "\n/* the entry\n   computation // */\nENTRY", 1)


def test_comments_are_whitespace() -> None:
    from conftest import MLP

    for name in ("baseline.hlo", "tp.hlo"):
        text = (MLP / "hlo" / name).read_text()
        plain, commented = parse_hlo(text, name), parse_hlo(_commented(text), name)
        assert commented.nodes == plain.nodes
        assert (commented.inputs, commented.outputs) == (plain.inputs, plain.outputs)
        assert commented.input_shardings == plain.input_shardings


def test_slashes_inside_strings_are_not_comments() -> None:
    text = (
        "HloModule m  // a module\n"
        "ENTRY main {\n"
        '  x = f32[4] parameter(0), metadata={op_name="a//b" source_file="//pkg/f.py"}\n'
        '  ROOT y = f32[4] add(x, x), metadata={op_name="jit(f)/*add*/" source_file="/*.py"'
        " source_line=7}  /* the sum */\n"
        "}\n"
    )
    graph = parse_hlo(text, "m.hlo")
    x, y = (graph.nodes[i] for i in sorted(graph.nodes))
    assert x.loc.file == "//pkg/f.py" and y.loc.file == "/*.py" and y.loc.line == 7


def test_errors_in_a_commented_module_point_at_the_line_as_written() -> None:
    text = (
        "HloModule m\nENTRY main { // e\n  x = f32[4] parameter(0)  /* x */\n"
        "  ROOT y = f32[4] add(x, ) // y\n}\n"
    )
    with pytest.raises(ScalifyError) as info:
        parse_hlo(text, "bad.hlo")
    err = info.value
    assert (err.path, err.line, err.column) == ("bad.hlo", 4, 26)
    assert err.message.startswith("expected one of ") and "found ')'" in err.message
    assert err.source_line == "  ROOT y = f32[4] add(x, ) // y"


def test_an_unclosed_block_comment_is_an_error_at_its_start() -> None:
    text = 'HloModule m\nENTRY main {\n  x = f32[4] parameter(0), metadata={op_name="/*"} /* x\n}\n'
    with pytest.raises(ScalifyError) as info:
        parse_hlo(text, "bad.hlo")
    err = info.value
    assert (err.line, err.column) == (3, 52)
    assert err.message == "expected '*/' closing this comment, found end of input"
