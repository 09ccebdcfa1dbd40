"""A framework's own operator library (`torch.library.custom_op`) reaches the FX frontend as
custom calls named `namespace::name`: undeclared, the report names the op with the line to
write; declared in a rule file, the op is its meaning. Here a MoE-style combine adds each
token's partial expert output into its row with a custom scatter-add, as torchtitan's
`deterministic_scatter_add` does."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import rules_with

torch = pytest.importorskip("torch")

import torch.distributed as dist  # noqa: E402
from scalify.compiler.compile import compile_texts  # noqa: E402
from torch.distributed._functional_collectives import all_reduce  # noqa: E402

from scalify.api import check_equivalent, fake_mesh  # noqa: E402
from scalify.capture.fx_trace import trace  # noqa: E402
from scalify.frontends.custom_calls import expand_custom_calls  # noqa: E402
from scalify.frontends.fx import graph_from_fx  # noqa: E402
from scalify.simulate.spmd import run_baseline  # noqa: E402


def _scatter_add_op(name: str, dim: int):
    """A library op `scalify_test::NAME` computing `out.scatter_add(dim, index, src)`."""

    def scatter_add(out: torch.Tensor, index: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
        return out.scatter_add(dim, index, src)

    op = torch.library.custom_op(f"scalify_test::{name}", mutates_args=())(scatter_add)
    op.register_fake(lambda out, index, src: torch.empty_like(out))
    return op


rows_added = _scatter_add_op("rows_added", 0)
columns_added = _scatter_add_op("columns_added", 1)


DECLARATION = 'custom_call "scalify_test::rows_added" = scatter_add[dim=0](0, 1, 2)\n'
TOKENS, ROUTED, HIDDEN, FFN = 6, 8, 4, 16


def combine(h, w, token_of_row):
    """Each routed row's expert output (h @ w) added into its token's row."""
    out = torch.zeros(TOKENS, HIDDEN)
    index = token_of_row.reshape(-1, 1).expand(-1, HIDDEN)
    return rows_added(out, index, h @ w)


def combine_row_parallel(h, w, token_of_row):
    """w split along FFN: each device's product is a partial sum, reduced after the combine."""
    return all_reduce(combine(h, w, token_of_row), "sum", dist.group.WORLD)


def combine_not_reduced(h, w, token_of_row):
    """BUG: the partial sums are combined but never reduced."""
    return combine(h, w, token_of_row)


@pytest.fixture()
def scratch_rules(tmp_path: Path) -> Path:
    """The shipped rules plus the declaration, in a folder of their own."""
    return rules_with(tmp_path / "rules", "scratch.srl", DECLARATION)


def _check(parallel, rules=None):
    mesh = fake_mesh("tp=2")
    torch.manual_seed(0)
    h, w = torch.randn(ROUTED, FFN), torch.randn(FFN, HIDDEN)
    token_of_row = torch.randint(0, TOKENS, (ROUTED,))
    return check_equivalent(
        combine,
        parallel,
        mesh=mesh,
        example_inputs=(h, w, token_of_row),
        parallel_inputs=(h[:, : FFN // 2], w[: FFN // 2], token_of_row),
        relations={"inputs": {"h": "shard(1, tp)", "w": "shard(0, tp)"}},
        rules=rules,
    )


def test_a_declared_library_op_is_proved(scratch_rules):
    report = _check(combine_row_parallel, scratch_rules)
    assert report.verdict == "equivalent", [s.reason for s in report.suspects[:2]]


def test_a_declared_library_op_does_not_hide_a_missing_reduction(scratch_rules):
    assert _check(combine_not_reduced, scratch_rules).verdict == "not_equivalent"


def test_an_undeclared_library_op_is_named_with_the_line_to_write():
    report = _check(combine_row_parallel)  # the shipped rules declare no scalify_test op
    assert report.verdict == "unknown"
    notes = " ".join(report.notes)
    assert "custom call `scalify_test::rows_added` has no declared meaning" in notes
    assert 'custom_call "scalify_test::rows_added" = operand(0)' in notes


@pytest.mark.parametrize(
    "name, op, dim", [("rows_added", rows_added, 0), ("columns_added", columns_added, 1)]
)
def test_the_scatter_add_meaning_computes_torchs_scatter_add(name, op, dim):
    declared = compile_texts(
        [
            (
                "scratch.srl",
                f'custom_call "scalify_test::{name}" = scatter_add[dim={dim}](0, 1, 2)\n',
            )
        ]
    ).custom_calls
    shape, n = (5, 3), 7
    src_shape = (n, 3) if dim == 0 else (5, n)

    def fn(out, src, column):
        index = column.reshape(-1, 1).expand(src_shape) if dim == 0 else column.expand(src_shape)
        return op(out, index, src)

    torch.manual_seed(1)
    out, src = torch.randn(shape), torch.randn(src_shape)
    column = torch.randint(0, shape[dim], (n,) if dim == 0 else (1, n))
    graph = graph_from_fx(trace(fn, (out, src, column)), "fn")
    expand_custom_calls(graph, declared)
    assert not graph.opaque_nodes()
    inputs = dict(zip(graph.inputs, (out.numpy(), src.numpy(), column.numpy()), strict=True))
    values = run_baseline(graph, inputs)
    expected = fn(out, src, column).numpy()
    np.testing.assert_allclose(values[graph.outputs[0]], expected, rtol=1e-6)


@torch.library.custom_op("scalify_test::added_and_source", mutates_args=())
def added_and_source(
    out: torch.Tensor, index: torch.Tensor, src: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    return out.scatter_add(0, index, src), src.clone()


@added_and_source.register_fake
def _(out, index, src):
    return torch.empty_like(out), torch.empty_like(src)


def test_a_library_op_with_several_results_is_not_read_as_a_one_result_meaning(tmp_path):
    """Each result of a two-result op would otherwise be built as the whole meaning (both as
    the scatter-add): it stays opaque, and the report says why."""
    declaration = 'custom_call "scalify_test::added_and_source" = scatter_add[dim=0](0, 1, 2)\n'
    rules = rules_with(tmp_path / "rules", "scratch.srl", declaration)

    def first(h, w, token_of_row):
        out = torch.zeros(TOKENS, HIDDEN)
        index = token_of_row.reshape(-1, 1).expand(-1, HIDDEN)
        return added_and_source(out, index, h @ w)[0]

    report = check_equivalent(
        first,
        first,
        mesh=fake_mesh("tp=2"),
        example_inputs=(
            torch.randn(ROUTED, FFN),
            torch.randn(FFN, HIDDEN),
            torch.zeros(ROUTED, dtype=torch.long),
        ),
        rules=rules,
    )
    notes = " ".join(report.notes)
    assert "`scalify_test::added_and_source`: it returns several results" in notes, notes
