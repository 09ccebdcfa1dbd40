"""The PyTorch FX frontend: ATen ops map to the canonical IR (checked numerically against
eager PyTorch), source lines come from stack traces, and the torch MLP example verifies end
to end from `.pt2` files, its bugs caught at their lines."""

from __future__ import annotations

import importlib.util
import json
import re

import numpy as np
import pytest
from conftest import REPO, caught_suspect

torch = pytest.importorskip("torch")

import torch.distributed as dist  # noqa: E402
import torch.distributed._functional_collectives as funcol  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from scalify.canon.canonicalize import canonicalize  # noqa: E402
from scalify.frontends import load_graph  # noqa: E402
from scalify.frontends.fx import graph_from_fx  # noqa: E402
from scalify.simulate.spmd import run_baseline  # noqa: E402

EXAMPLE = REPO / "examples" / "torch_mlp"
MODEL = "examples/torch_mlp/model.py"
HERE = "tests/test_fx_frontend.py"


def model_line(pattern: str) -> int:
    for number, line in enumerate((EXAMPLE / "model.py").read_text().splitlines(), 1):
        if re.search(pattern, line):
            return number
    raise AssertionError(pattern)


def this_line(pattern: str) -> int:
    for number, line in enumerate((REPO / HERE).read_text().splitlines(), 1):
        if pattern in line and "this_line(" not in line:
            return number
    raise AssertionError(pattern)


class Collectives(nn.Module):
    def forward(self, x):
        a = funcol.all_gather_tensor(x, 0, dist.group.WORLD)
        b = funcol.reduce_scatter_tensor(a, "sum", 0, dist.group.WORLD)
        return funcol.all_reduce(b, "avg", dist.group.WORLD)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """The example exported once (fake 4-rank process group), plus a program of collectives
    traced on the same group; the group is gone before any test reads a file, so the files
    must carry their group sizes themselves."""
    spec = importlib.util.spec_from_file_location("torch_mlp_export", EXAMPLE / "export.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path_factory.mktemp("torch_mlp")
    try:
        files = module.export_all(out, tp=4)
        collectives = torch.export.export(Collectives(), (torch.randn(8, 4),))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    return {"files": {k: str(v) for k, v in files.items()}, "collectives": collectives}


def lower(module: nn.Module, *args):
    return canonicalize(graph_from_fx(torch.export.export(module, args), "<memory>"))


def ops(graph, op):
    return [n for n in graph.nodes.values() if n.op == op]


# ---- op mapping


def test_linear_is_one_dot_contracting_the_feature_dims(exported):
    graph = load_graph(exported["files"]["baseline"])
    assert sorted(graph.input_name(i) for i in graph.inputs) == [
        "bias",
        "fc1_bias",
        "fc1_weight",
        "fc2_weight",
        "x",
    ]
    dots = ops(graph, "dot")
    assert [(d.attrs["lhs_contracting"], d.attrs["rhs_contracting"]) for d in dots] == [
        ((1,), (1,)),
        ((1,), (1,)),
    ]
    assert all(d.attrs["lhs_batch"] == d.attrs["rhs_batch"] == () for d in dots)
    assert graph.input_name(dots[0].operands[1]) == "fc1_weight"
    assert not graph.opaque_nodes()


def test_collectives_map_with_the_group_size_recorded_in_the_file(exported):
    graph = load_graph(exported["files"]["tp"])
    (reduce,) = ops(graph, "all_reduce")
    assert reduce.attrs == {"groups": ((0, 1, 2, 3),), "op": "sum"}
    assert graph.num_partitions == 4


def test_gather_and_scatter_map_to_dim_0_and_unknown_groups_stay_opaque(exported):
    program = exported["collectives"]
    graph = canonicalize(graph_from_fx(program, "<memory>", group_sizes={"0": 4}))
    (gather,) = ops(graph, "all_gather")
    (scatter,) = ops(graph, "reduce_scatter")
    assert gather.attrs == {"groups": ((0, 1, 2, 3),), "dim": 0} and gather.shape == (32, 4)
    assert scatter.attrs == {"groups": ((0, 1, 2, 3),), "op": "sum", "dim": 0}
    (reduce,) = ops(graph, "all_reduce")
    (mean,) = [n for n in graph.nodes.values() if n.op == "div" and n.operands[0] == reduce.id]
    assert graph.outputs == [mean.id]  # avg = sum over the group, then / group size
    # all_reduce names its group only by a string: no recorded size and no live group of
    # that name means nothing is assumed.
    unknown = canonicalize(graph_from_fx(program, "<memory>"))
    (opaque,) = unknown.opaque_nodes()
    assert opaque.attrs["hlo_op"] == "_c10d_functional.all_reduce"
    assert ops(unknown, "all_gather") and not ops(unknown, "all_reduce")


class Reductions(nn.Module):
    def forward(self, x):
        a = x.sum(dim=1)
        b = x.amax(dim=-1, keepdim=True)
        c = x.mean(dim=0)
        d = torch.softmax(x, dim=1)
        return a, b, c, d, x * 2.0


def test_reduce_dims_and_scalar_operands():
    graph = lower(Reductions(), torch.randn(4, 6))
    reduces = [(n.attrs["op"], n.attrs["dims"], n.shape) for n in ops(graph, "reduce")]
    assert reduces == [
        ("sum", (1,), (4,)),
        ("max", (1,), (4,)),
        ("sum", (0,), (6,)),
        ("max", (1,), (4,)),  # softmax: max-reduce, broadcast, sub, exp, sum-reduce, div
        ("sum", (1,), (4,)),
    ]
    mean = graph.node(graph.outputs[2])
    assert mean.op == "div"
    count = graph.node(graph.node(mean.operands[1]).operands[0])
    assert (count.op, count.shape, count.attrs["value"]) == ("constant", (), "4")
    scaled = graph.node(graph.outputs[4])
    fill = graph.node(scaled.operands[1])
    assert (fill.op, fill.attrs["dims"]) == ("broadcast", ())
    assert graph.node(fill.operands[0]).attrs["value"] == "2"


class Everything(nn.Module):
    """Many ATen ops in one program; the IR must compute what eager PyTorch computes."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(6, 5))

    def forward(self, x, y, z):
        a = torch.matmul(x, self.w.t())
        b = torch.bmm(a, a.transpose(1, 2))
        c = F.gelu(b) + F.gelu(b, approximate="tanh") * 2.0 - F.silu(b) / 3
        d = torch.softmax(c, dim=-1) + F.relu(c).mean(dim=1, keepdim=True)
        e = torch.cat([d, d * 2, d.exp(), -d], dim=2)
        f = e[:, 1:, ::2].sum(dim=(0,)) + e.select(1, 0).amax(dim=0)[None, :6]
        g = torch.where(f > 0, f, f.tanh()).reshape(12).unsqueeze(0).expand(3, 12)
        h = g.permute(1, 0).contiguous().view(4, 9) + torch.log_softmax(y, dim=0).sum()
        i = torch.narrow(h, 1, 2, 5).to(torch.float64).abs().rsqrt().sqrt().to(torch.float32)
        j = 1.0 - i + torch.clamp(i, min=0.1, max=0.9) + (y @ y.t()).sum(1, keepdim=True)
        k = F.linear(z, self.w) + torch.addmm(torch.ones(6), z, self.w.t())
        parts = torch.split(k, [2, 4], dim=1)
        stacked = torch.stack([z, z, z, z]).sum(0)
        return j * (k.sum() + k.mean() + k.max()), parts[1], stacked.cumsum(1) - stacked


def test_ops_compute_what_torch_computes():
    torch.manual_seed(0)
    module = Everything().eval()
    args = (torch.randn(2, 3, 5), torch.randn(4, 4), torch.randn(4, 5))
    graph = lower(module, *args)
    assert not graph.opaque_nodes()
    assert any(n.op == "cumsum" for n in graph.nodes.values())  # not a masked square sum
    named = {"x": args[0], "y": args[1], "z": args[2], "w": module.w.detach()}
    inputs = {i: named[graph.input_name(i)].double().numpy() for i in graph.inputs}
    values = run_baseline(graph, inputs)
    with torch.no_grad():
        expected = module(*args)
    for output, want in zip(graph.outputs, expected, strict=True):
        np.testing.assert_allclose(values[output], want.double().numpy(), rtol=1e-5, atol=1e-5)


class WithCumprod(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.randn(3, 4))

    def forward(self, ids):
        return torch.cumprod(self.scale * ids[:, None], 0) * 2  # the line the source test looks for


def test_unmapped_ops_are_opaque_and_lines_come_from_the_stack_trace():
    graph = lower(WithCumprod(), torch.tensor([1, 2, 3]))
    (opaque,) = graph.opaque_nodes()
    assert opaque.attrs["hlo_op"] == "aten.cumprod"
    assert opaque.dtype == "f32" and opaque.shape == (3, 4)
    assert graph.input_name(graph.inputs[1]) == "ids"
    assert {graph.node(i).dtype for i in graph.inputs} == {"f32", "s64"}
    loc = graph.node(graph.outputs[0]).loc
    assert (loc.file, loc.line, loc.function) == (
        HERE,
        this_line("return torch.cumprod(self.scale"),
        "forward",
    )


def test_source_line_of_a_model_op(exported):
    graph = load_graph(exported["files"]["baseline"])
    first_dot = ops(graph, "dot")[0]
    assert (first_dot.loc.file, first_dot.loc.line, first_dot.loc.function) == (
        MODEL,
        model_line(r"h = gelu\(self\.fc1\(x\)\)"),
        "forward",
    )


# ---- end to end


def test_tp_mlp_is_equivalent(exported, cli, tmp_path):
    """A hand-written TP module exported with plain tensors: the weights' layouts are read
    from their shapes, so the proof holds for weights cut that way (exit 3) until a
    relations file states it (exit 0)."""
    files = exported["files"]
    result = cli("verify", files["baseline"], files["tp"], "--mesh", "tp=4")
    assert result.code == 3, result.out + result.err
    assert result.out.startswith("verdict: equivalent, assuming")
    assert "fc1_weight: shard(0, tp) (inferred from shapes)" in result.out
    assert "fc2_weight: shard(1, tp) (inferred from shapes)" in result.out
    entry = result.out.split("state them with --relations: ")[1].splitlines()[0]
    (tmp_path / "relations.json").write_text(entry)
    stated = cli(
        "verify",
        files["baseline"],
        files["tp"],
        "--mesh",
        "tp=4",
        "--relations",
        str(tmp_path / "relations.json"),
    )
    assert stated.code == 0 and stated.out.startswith("verdict: equivalent\n"), stated.out


def test_dtensor_mlp_is_equivalent(exported, cli):
    files = exported["files"]
    result = cli("verify", files["baseline"], files["dtensor"], "--mesh", "tp=4", "-q")
    # exported by torch.export alone, the file keeps no placements: read from shapes
    assert result.code == 3, result.out + result.err
    assert result.out == "verdict: equivalent, assuming\n"


def test_dtensor_rowwise_bias_shared_out_is_equivalent(exported, cli):
    """RowwiseParallel adds bias / tp on every device before the all-reduce."""
    files = exported["files"]
    result = cli(
        "verify",
        files["baseline_biased"],
        files["dtensor_biased"],
        "--mesh",
        "tp=4",
        "--format",
        "json",
    )
    report = json.loads(result.out)
    assert report["verdict"] == "equivalent", report["suspects"]
    assert "partial_plus_shared_bias" in report["stats"]["rules_fired"]


EXPECTED = {
    "bias_before_allreduce": ("add", r"# BUG: bias_before_allreduce"),
    # No op is computed on the BUG line itself: the partial sum is first misused where the
    # bias is added, so that is the line to report.
    "missing_allreduce": ("add", r"return y \+ bias"),
    "double_allreduce": ("all_reduce", r"# BUG: double_allreduce"),
}


@pytest.mark.parametrize("bug", sorted(EXPECTED))
def test_broken_variant_is_caught_at_its_line(exported, cli, bug):
    op, pattern = EXPECTED[bug]
    files = exported["files"]
    result = cli(
        "verify", files["baseline"], files[f"tp_{bug}"], "--mesh", "tp=4", "--format", "json"
    )
    assert caught_suspect(result) == (op, MODEL, model_line(pattern), "forward")


def test_a_bad_pt2_file_is_a_clean_error(cli, tmp_path):
    bad = tmp_path / "broken.pt2"
    bad.write_text("not a zip")
    result = cli("verify", str(bad), str(bad))
    assert result.code == 2
    assert result.err.startswith(f"{bad}: error: not a PyTorch export file")
    assert "Traceback" not in result.err


class ExpertRouting(nn.Module):
    """The routing of a batched-mm MoE (transformers' `batched_mm` experts): the top-k
    experts per token, their weights renormalised in place, each token's expert weights
    picked by `weights[expert_ids]`."""

    def __init__(self) -> None:
        super().__init__()
        self.experts = nn.Parameter(torch.randn(4, 8, 16))

    def forward(self, scores):
        weights, ids = torch.topk(scores.softmax(-1), 2, dim=-1)
        weights /= weights.sum(dim=-1, keepdim=True)
        picked = self.experts[ids.reshape(-1)]
        return picked * weights.reshape(-1, 1, 1)


def test_topk_index_and_in_place_division_of_a_result_have_semantics():
    from scalify.capture.fx_trace import trace

    module = ExpertRouting()
    scores = torch.randn(3, 4)
    graph = canonicalize(graph_from_fx(trace(module, (scores,)), "<memory>"))
    assert not graph.opaque_nodes()
    assert {n.attrs["part"] for n in ops(graph, "top_k")} == {0, 1}
    assert ops(graph, "take")
    inputs = {
        i: (scores if graph.input_name(i) == "scores" else module.experts).detach().numpy()
        for i in graph.inputs
    }
    got = run_baseline(graph, inputs)[graph.outputs[0]]
    np.testing.assert_allclose(got, module(scores).detach().numpy(), rtol=1e-5, atol=1e-6)


class _EntryPerRow(nn.Module):
    """Megatron's predicted logits: `logits[arange(rows), target]`."""

    def forward(self, logits, target):
        return logits[torch.arange(logits.shape[0]), target]


class _TwoIndexTensors(nn.Module):
    def forward(self, x, i, j):
        return x[i, j]


def test_an_entry_per_row_by_arange_and_columns_is_take_along():
    graph = lower(_EntryPerRow(), torch.randn(6, 10), torch.randint(0, 10, (6,)))
    assert ops(graph, "take_along") and not ops(graph, "opaque")
    logits, target = np.random.default_rng(0).normal(size=(6, 10)), np.arange(6) % 10
    inputs = dict(zip(graph.inputs, (logits, target), strict=True))
    (out,) = graph.outputs
    np.testing.assert_allclose(run_baseline(graph, inputs)[out], logits[np.arange(6), target])


def test_other_pairs_of_index_tensors_stay_opaque():
    i = torch.randint(0, 6, (4,))
    graph = lower(_TwoIndexTensors(), torch.randn(6, 10), i, torch.randint(0, 10, (4,)))
    assert ops(graph, "opaque")


def test_a_collective_over_one_device_is_its_operand():
    """Megatron's cross-entropy all-reduces at tensor-parallel size 1 too."""
    from scalify.capture.fx_trace import fake_process_group, trace

    fake_process_group(1)
    try:
        group = dist.group.WORLD
        gm = trace(lambda x: funcol.all_reduce(x * 2, "max", group), (torch.randn(4),))
        graph = canonicalize(graph_from_fx(gm, "<memory>", world_size=1))
        assert not ops(graph, "all_reduce")
    finally:
        dist.destroy_process_group()


def test_an_as_strided_over_all_of_a_contiguous_tensor_in_order_is_a_reshape():
    """Autograd's backward of an in-place op on a view replays the view so."""
    from scalify.capture.fx_trace import trace

    def whole(x):
        return torch.as_strided(x.flatten(), (2, 3, 4), (12, 4, 1), 0) * 2

    def strided(x):
        return torch.as_strided(x.flatten(), (3, 2), (1, 3), 0) * 2  # a transpose

    for program, reads in ((whole, True), (strided, False)):
        graph = canonicalize(graph_from_fx(trace(program, (torch.randn(4, 6),)), "<memory>"))
        assert bool(ops(graph, "opaque")) != reads, program.__name__


class Remainders(nn.Module):
    def forward(self, x, n):
        return torch.remainder(x, 3.0), torch.fmod(x, 3.0), n % 5, torch.fmod(n, 5)


def test_remainder_takes_the_divisors_sign_and_fmod_the_dividends():
    """`%` (torch.remainder) is floored, fmod truncated: on negative operands they differ,
    so they are two ops (one read as the other would prove a wrong program equivalent)."""
    x, n = torch.tensor([-4.5, -1.0, 2.0, 7.5]), torch.tensor([-7, -1, 3, 12])
    graph = lower(Remainders(), x, n)
    floored, truncated = (graph.node(graph.outputs[k]).op for k in (0, 1))
    assert floored != truncated
    named = {"x": x.double().numpy(), "n": n.numpy()}
    values = run_baseline(graph, {i: named[graph.input_name(i)] for i in graph.inputs})
    expected = Remainders()(x, n)
    for output, want in zip(graph.outputs, expected, strict=True):
        np.testing.assert_array_equal(values[output], want.numpy())


class Polar(nn.Module):
    """RoPE's frequencies as DeepSeek-V2 and Llama 4 make them: `torch.polar`, which the
    tracer writes as an empty complex tensor filled through `view_as_real(...).select(...)`."""

    def forward(self, x):
        freqs = x[..., None] * torch.arange(1.0, 5.0)
        return torch.view_as_real(torch.polar(torch.ones_like(freqs) * 2, freqs))


def test_a_complex_tensor_filled_through_its_real_view_is_read():
    from scalify.capture.fx_trace import trace

    x = torch.arange(6.0)
    graph = canonicalize(graph_from_fx(trace(Polar(), (x,)), "<memory>"))
    values = run_baseline(graph, {graph.inputs[0]: x.double().numpy()})
    np.testing.assert_allclose(values[graph.outputs[0]], Polar()(x).numpy(), rtol=1e-5, atol=1e-5)
