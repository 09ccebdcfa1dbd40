"""`scalify.assert_equivalent` on torch's own sequence parallelism: a Megatron-style block
(norm, MLP, residual) parallelised with `SequenceParallel`, `ColwiseParallel(input_layouts=
Shard(1))` and `RowwiseParallel(output_layouts=Shard(1))` is proved equivalent to the plain
module with no relations written by hand, and one-line bugs are reported at their line."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from conftest import REPO, bug_line

torch = pytest.importorskip("torch")

import torch.distributed as dist  # noqa: E402
import torch.distributed._functional_collectives as funcol  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402
from torch.distributed._functional_collectives import all_reduce  # noqa: E402
from torch.distributed.tensor import Shard  # noqa: E402
from torch.distributed.tensor.parallel import (  # noqa: E402
    ColwiseParallel,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)

import scalify  # noqa: E402
from scalify.api import check_equivalent, fake_mesh  # noqa: E402
from scalify.canon.canonicalize import canonicalize  # noqa: E402
from scalify.capture.fx_trace import trace  # noqa: E402
from scalify.frontends.fx import graph_from_fx  # noqa: E402
from scalify.simulate.spmd import run_baseline  # noqa: E402

THIS = REPO / "tests" / "test_api_sequence_parallel.py"
HERE = "tests/test_api_sequence_parallel.py"
TP = 4
SEQUENCE = Shard(1)  # (batch, seq, hidden) activations split along the sequence


class Block(nn.Module):
    """x + fc2(gelu(fc1(norm(x)))) on (batch, seq, hidden); `bug` names a one-line bug."""

    def __init__(self, norm: str = "layer", bug: str | None = None) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(64) if norm == "layer" else nn.RMSNorm(64)
        self.fc1 = nn.Linear(64, 256)
        self.fc2 = nn.Linear(256, 64)
        self.bug = bug

    def forward(self, x):
        y = self.fc2(F.gelu(self.fc1(self.norm(x)), approximate="tanh"))
        if self.bug == "replicated_fc2_output":  # fc2 all-reduced: y is the whole sequence,
            return x + y[:, : x.shape[1]]  # BUG: replicated_fc2_output (right on rank 0 only)
        if self.bug == "reduced_twice":  # fc2's output is already reduce-scattered
            return x + all_reduce(y, "sum", dist.group.WORLD)  # BUG: reduced_twice
        return x + y


def sp_plan(fc2_output: Shard | None = SEQUENCE) -> dict:
    """Megatron SP: the norm on sequence shards, an all-gather into fc1, a reduce-scatter
    along the sequence out of fc2 (`fc2_output=None`: RowwiseParallel's all-reduce)."""
    fc2 = RowwiseParallel() if fc2_output is None else RowwiseParallel(output_layouts=fc2_output)
    return {
        "norm": SequenceParallel(),
        "fc1": ColwiseParallel(input_layouts=SEQUENCE),
        "fc2": fc2,
    }


@pytest.fixture(scope="module")
def mesh():
    """A 1-D `tp=4` DeviceMesh over a fake process group, gone after this module."""
    yield fake_mesh(f"tp={TP}")
    dist.destroy_process_group()


def parallel(module: nn.Module, mesh, plan: dict) -> nn.Module:
    return parallelize_module(copy.deepcopy(module), mesh, plan)


def rank0_shard(x: torch.Tensor) -> torch.Tensor:
    """What rank 0 holds of a sequence-sharded activation."""
    return x.chunk(TP, dim=1)[0]


@pytest.mark.parametrize(("norm", "batch"), [("layer", 2), ("rms", 2), ("layer", 1)])
def test_sequence_parallel_block_is_equivalent(mesh, norm, batch):
    """Batch 1 takes funcol's other form of the gather along the sequence (a view)."""
    torch.manual_seed(0)
    base = Block(norm)
    x = torch.randn(batch, 16, 64)
    report = scalify.assert_equivalent(
        base,
        parallel(base, mesh, sp_plan()),
        mesh=mesh,
        example_inputs=(x,),
        parallel_inputs=(rank0_shard(x),),
    )
    assert report.verdict == "equivalent"
    assert "x: shard(1, tp) (inferred from shapes)" in report.relations["inputs"]
    assert report.relations["outputs"] == ["output 0: shard(1, tp) (inferred from shapes)"]
    assert {"all_gather_of_shard", "reduce_scatter_of_partial"} <= set(report.stats["rules_fired"])


BUGS = [
    ("replicated_fc2_output", None, "slice", "each device's own part was probably meant"),
    ("reduced_twice", SEQUENCE, "all_reduce", "it adds blocks that do not belong together"),
]


@pytest.mark.parametrize(("bug", "fc2_output", "op", "reason"), BUGS, ids=[b[0] for b in BUGS])
def test_sequence_parallel_bug_fails_at_its_line(mesh, bug, fc2_output, op, reason):
    torch.manual_seed(0)
    base = Block()
    buggy = Block(bug=bug)
    buggy.load_state_dict(base.state_dict())
    x = torch.randn(2, 16, 64)
    report = check_equivalent(
        base,
        parallel(buggy, mesh, sp_plan(fc2_output)),
        mesh=mesh,
        example_inputs=(x,),
        parallel_inputs=(rank0_shard(x),),
    )
    assert report.verdict == "not_equivalent" and report.counterexample
    first = report.suspects[0]
    assert (first.op, first.file, first.line) == (op, HERE, bug_line(bug, THIS))
    assert reason in first.reason


def test_sequence_parallel_bug_raises_in_assert_equivalent(mesh):
    torch.manual_seed(0)
    base = Block()
    buggy = Block(bug="replicated_fc2_output")
    buggy.load_state_dict(base.state_dict())
    x = torch.randn(2, 16, 64)
    with pytest.raises(AssertionError) as failure:
        scalify.assert_equivalent(
            base,
            parallel(buggy, mesh, sp_plan(None)),
            mesh=mesh,
            example_inputs=(x,),
            parallel_inputs=(rank0_shard(x),),
        )
    message = str(failure.value)
    assert "verdict: not_equivalent" in message
    assert f"{HERE}:{bug_line('replicated_fc2_output', THIS)} in forward:" in message


# ---- the frontend pieces the block needs


class Norms(nn.Module):
    """LayerNorm (affine, and over two dims without weights) and RMSNorm (whose `mean + eps`
    make_fx keeps as an in-place `add_`)."""

    def __init__(self) -> None:
        super().__init__()
        self.ln, self.rms = nn.LayerNorm(8), nn.RMSNorm(8)
        self.ln2 = nn.LayerNorm([3, 8], bias=False)
        for parameter in self.parameters():
            nn.init.normal_(parameter)

    def forward(self, x):
        return self.ln(x) + self.ln2(x) * 2 + self.rms(x)


def test_layer_and_rms_norm_compute_what_torch_computes():
    torch.manual_seed(0)
    module, x = Norms(), torch.randn(2, 3, 8)
    graph = canonicalize(graph_from_fx(trace(module, (x,)), "<norms>"))
    assert not graph.opaque_nodes()
    named = {"x": x} | {k.replace(".", "_"): v.detach() for k, v in module.named_parameters()}
    inputs = {i: named[graph.input_name(i)].double().numpy() for i in graph.inputs}
    values = run_baseline(graph, inputs)
    with torch.no_grad():
        expected = module(x).double().numpy()
    np.testing.assert_allclose(values[graph.outputs[0]], expected, rtol=1e-5, atol=1e-5)


class SequenceCollectives(nn.Module):
    """funcol's gather and scatter along dim 1: dim-0 collectives plus chunks and a cat
    (or, for the gather with batch 1, a view)."""

    def forward(self, x):
        gathered = funcol.all_gather_single(x, 1, dist.group.WORLD)
        return funcol.reduce_scatter_single(gathered * 2, "sum", 1, dist.group.WORLD)


@pytest.mark.parametrize("batch", [2, 1])
def test_gather_and_scatter_along_the_sequence_are_one_collective_each(mesh, batch):
    traced = trace(SequenceCollectives(), (torch.randn(batch, 4, 8),))
    graph = canonicalize(graph_from_fx(traced, "<collectives>"))
    kinds = {n.op: n for n in graph.nodes.values() if n.op in ("all_gather", "reduce_scatter")}
    assert {op: n.attrs["dim"] for op, n in kinds.items()} == {
        "all_gather": 1,
        "reduce_scatter": 1,
    }
    shapes = (kinds["all_gather"].shape, kinds["reduce_scatter"].shape)
    assert shapes == ((batch, 16, 8), (batch, 4, 8))
    assert not [n for n in graph.nodes.values() if n.op == "concatenate"]
