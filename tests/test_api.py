"""The Python API: `scalify.assert_equivalent` on DTensor-parallelised modules (an MLP and an
attention block, each with a one-line bug that must be reported at its line), and
`scalify.capture.export` writing `.pt2` files that `scalify verify` proves."""

from __future__ import annotations

import copy

import pytest
from conftest import REPO, bug_line

torch = pytest.importorskip("torch")

import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402
from torch.distributed._functional_collectives import all_reduce  # noqa: E402
from torch.distributed.tensor import Partial  # noqa: E402
from torch.distributed.tensor.parallel import (  # noqa: E402
    ColwiseParallel,
    RowwiseParallel,
    parallelize_module,
)

import scalify  # noqa: E402
from scalify.api import check_equivalent, fake_mesh  # noqa: E402
from scalify.capture.fx_trace import refold_batched_matmuls  # noqa: E402

THIS = REPO / "tests" / "test_api.py"
HERE = "tests/test_api.py"


class MLP(nn.Module):
    """fc2(gelu(fc1(x))) + bias, fc2 without a bias of its own."""

    def __init__(self, hidden: int = 64, ffn: int = 256) -> None:
        super().__init__()
        self.fc1 = nn.Linear(hidden, ffn)
        self.fc2 = nn.Linear(ffn, hidden, bias=False)
        self.bias = nn.Parameter(torch.randn(hidden))

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh")) + self.bias


class PartialSumMLP(MLP):
    """fc2 is planned to leave its output a partial sum, reduced by hand in forward."""

    def forward(self, x):
        y = self.fc2(F.gelu(self.fc1(x), approximate="tanh"))
        return all_reduce(y + self.bias, "sum", dist.group.WORLD)  # BUG: bias_before_allreduce


class HookedMLP(MLP):
    """fc2's partial sum reduced by a forward hook on fc2 (`reduce_in_a_hook`), not in forward."""

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh"))


def reduce_in_a_hook(bias: torch.Tensor):
    """A forward hook that all-reduces a module's partial output, the bias added first."""

    def hook(module, args, output):
        return all_reduce(output + bias, "sum", dist.group.WORLD)  # BUG: bias_in_hook

    return hook


class BiasedMLP(nn.Module):
    """fc2 with its own bias, on 3-D inputs: `linear` traces as a view of `addmm`, the bias
    added before the product is split back into batch and sequence."""

    def __init__(self, hidden: int = 64, ffn: int = 256) -> None:
        super().__init__()
        self.fc1 = nn.Linear(hidden, ffn)
        self.fc2 = nn.Linear(ffn, hidden)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class RowBiasMLP(nn.Module):
    """fc2's bias added by hand after its row-parallel product is reduced (transformers'
    `rowwise` does this), or before the reduction (`bug`: the bias is summed over devices)."""

    def __init__(self, base: BiasedMLP, bug: bool = False) -> None:
        super().__init__()
        self.fc1 = copy.deepcopy(base.fc1)
        self.fc2 = nn.Linear(base.fc2.in_features, base.fc2.out_features, bias=False)
        self.fc2.weight = nn.Parameter(base.fc2.weight.detach().clone())
        self.bias = nn.Parameter(base.fc2.bias.detach().clone())
        self.bug = bug

    def forward(self, x):
        y = self.fc2(F.gelu(self.fc1(x)))
        if self.bug:
            return all_reduce(y + self.bias, "sum", dist.group.WORLD)  # BUG: bias_summed
        return all_reduce(y, "sum", dist.group.WORLD) + self.bias


@pytest.mark.parametrize("bug", [False, True], ids=["after_reduce", "before_reduce"])
def test_a_bias_added_after_the_reduction_on_3d_inputs(mesh, bug):
    torch.manual_seed(0)
    base = BiasedMLP()
    plan = {"fc1": ColwiseParallel(), "fc2": RowwiseParallel(output_layouts=Partial())}
    model = parallel(RowBiasMLP(base, bug), mesh, plan)
    report = check_equivalent(base, model, mesh=mesh, example_inputs=(torch.randn(2, 8, 64),))
    if not bug:
        assert report.verdict == "equivalent", [s.reason for s in report.suspects[:2]]
        return
    assert report.verdict == "not_equivalent"
    first = report.suspects[0]
    assert (first.file, first.line) == (HERE, bug_line("bias_summed", THIS)), first.reason


class Attention(nn.Module):
    """Multi-head self-attention without masks; `bug` splits the heads with the global head
    count, which on a tensor-parallel shard cuts head_dim instead of the heads."""

    def __init__(self, dim: int = 64, heads: int = 8, bug: bool = False) -> None:
        super().__init__()
        self.heads, self.head_dim, self.bug = heads, dim // heads, bug
        self.q = nn.Linear(dim, dim, bias=False)
        self.k = nn.Linear(dim, dim, bias=False)
        self.v = nn.Linear(dim, dim, bias=False)
        self.o = nn.Linear(dim, dim, bias=False)

    def forward(self, x):
        # The body stays in forward: stack traces keep only `forward` frames.
        b, s, _ = x.shape
        if self.bug:  # the global head count on a local shard: each "head" is a head_dim slice
            q = self.q(x).view(b, s, self.heads, -1).transpose(1, 2)  # BUG: global_head_count
            k = self.k(x).view(b, s, self.heads, -1).transpose(1, 2)
            v = self.v(x).view(b, s, self.heads, -1).transpose(1, 2)
        else:  # -1: as many heads as this shard holds
            q = self.q(x).view(b, s, -1, self.head_dim).transpose(1, 2)
            k = self.k(x).view(b, s, -1, self.head_dim).transpose(1, 2)
            v = self.v(x).view(b, s, -1, self.head_dim).transpose(1, 2)
        scores = torch.softmax(q @ k.transpose(-2, -1) * self.head_dim**-0.5, dim=-1)
        return self.o((scores @ v).transpose(1, 2).reshape(b, s, -1))


ATTENTION_PLAN = {
    "q": ColwiseParallel(),
    "k": ColwiseParallel(),
    "v": ColwiseParallel(),
    "o": RowwiseParallel(),
}


@pytest.fixture(scope="module")
def mesh():
    """A 1-D `tp=4` DeviceMesh over a fake process group, gone after this module."""
    yield fake_mesh("tp=4")
    dist.destroy_process_group()


def parallel(module: nn.Module, mesh, plan: dict) -> nn.Module:
    return parallelize_module(copy.deepcopy(module), mesh, plan)


def test_dtensor_mlp_is_equivalent(mesh):
    torch.manual_seed(0)
    base = MLP()
    tp = parallel(base, mesh, {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
    report = scalify.assert_equivalent(base, tp, mesh=mesh, example_inputs=(torch.randn(8, 64),))
    assert report.verdict == "equivalent"
    assert "fc2_weight: shard(1, tp) (DTensor placement)" in report.relations["inputs"]


def test_bias_before_allreduce_fails_at_its_line(mesh):
    torch.manual_seed(0)
    base = MLP()
    buggy = PartialSumMLP()
    buggy.load_state_dict(base.state_dict())
    plan = {"fc1": ColwiseParallel(), "fc2": RowwiseParallel(output_layouts=Partial())}
    with pytest.raises(AssertionError) as failure:
        scalify.assert_equivalent(
            base, parallel(buggy, mesh, plan), mesh="tp=4", example_inputs=(torch.randn(8, 64),)
        )
    message = str(failure.value)
    assert "verdict: not_equivalent" in message
    assert f"{HERE}:{bug_line('bias_before_allreduce', THIS)} in forward: add" in message


def test_a_bias_added_in_a_forward_hook_fails_at_the_hooks_line(mesh):
    """make_fx keeps only `forward` frames: the hook's ops were placed at the line that
    called fc2. The report names the hook's line."""
    torch.manual_seed(0)
    base = MLP()
    buggy = HookedMLP()
    buggy.load_state_dict(base.state_dict())
    plan = {"fc1": ColwiseParallel(), "fc2": RowwiseParallel(output_layouts=Partial())}
    tp = parallel(buggy, mesh, plan)
    tp.fc2.register_forward_hook(reduce_in_a_hook(tp.bias))  # after the plan's own hook
    with pytest.raises(AssertionError) as failure:
        scalify.assert_equivalent(base, tp, mesh="tp=4", example_inputs=(torch.randn(8, 64),))
    message = str(failure.value)
    assert "verdict: not_equivalent" in message
    assert f"{HERE}:{bug_line('bias_in_hook', THIS)} in hook: add" in message


def test_dtensor_attention_is_equivalent(mesh):
    torch.manual_seed(0)
    base = Attention()
    report = scalify.assert_equivalent(
        base,
        parallel(base, mesh, ATTENTION_PLAN),
        mesh=mesh,
        example_inputs=(torch.randn(2, 16, 64),),
    )
    assert report.verdict == "equivalent"


def test_attention_global_head_count_fails_at_its_line(mesh):
    torch.manual_seed(0)
    base = Attention()
    buggy = Attention(bug=True)
    buggy.load_state_dict(base.state_dict())
    report = check_equivalent(
        base,
        parallel(buggy, mesh, ATTENTION_PLAN),
        mesh=mesh,
        example_inputs=(torch.randn(2, 16, 64),),
    )
    assert report.verdict == "not_equivalent" and report.counterexample
    first = report.suspects[0]
    assert (first.op, first.file, first.line) == (
        "split",
        HERE,
        bug_line("global_head_count", THIS),
    )
    assert "heads and head_dim swapped" in first.reason


def test_refolded_matmul_computes_the_same(mesh):
    """make_fx turns a 4-D `q @ k^T` into a bmm over merged batch dims; the refold puts one
    matmul back (what the rules can follow with sharded heads) without changing values."""
    from torch.fx.experimental.proxy_tensor import make_fx

    torch.manual_seed(0)
    module = Attention()
    x = torch.randn(2, 16, 64)
    gm = make_fx(module)(x)
    before = gm(x)
    assert refold_batched_matmuls(gm) == 2
    gm.recompile()
    ops = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
    assert "aten.bmm.default" not in ops and ops.count("aten.matmul.default") == 2
    torch.testing.assert_close(gm(x), before)


def test_capture_export_writes_files_scalify_verifies(mesh, tmp_path, cli):
    torch.manual_seed(0)
    base = MLP()
    tp = parallel(base, mesh, {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
    x = torch.randn(8, 64)
    baseline = scalify.capture.export(base, (x,), tmp_path / "baseline.pt2")
    distributed = scalify.capture.export(tp, (x,), tmp_path / "tp.pt2")
    result = cli("verify", str(baseline), str(distributed), "--mesh", "tp=4", "-q")
    assert result.code == 0, result.out + result.err
    assert result.out == "verdict: equivalent\n"


@pytest.mark.parametrize("x, target", [("x", "t"), ("x", "mm"), ("addmm", "t")])
def test_an_argument_named_like_a_traced_node_is_an_input(mesh, x, target):
    """A training step's target called `t` (or `mm`, or its input `addmm`):
    the traced graph already has a node of that name, which made FX's lint fail with
    `Node redefined name t!`; each argument keeps its name and pairs by it."""
    torch.manual_seed(0)
    base = MLP()
    tp = parallel(base, mesh, {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})

    def stepper(model: nn.Module):
        namespace: dict = {"F": F, "model": model}
        exec(f"def step({x}, {target}):\n    return F.mse_loss(model({x}), {target})", namespace)
        return namespace["step"]

    inputs = (torch.randn(8, 64), torch.randn(8, 64))
    report = scalify.assert_equivalent(stepper(base), stepper(tp), mesh=mesh, example_inputs=inputs)
    for name in (x, target):
        assert f"{name}: replicate (inferred from shapes)" in report.relations["inputs"]
