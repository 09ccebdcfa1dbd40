"""Inferred layouts checked against the values both programs hold (the Python API): a fused
QKV weight cut on the host as one block per rank, while the attention reads it per part
(q, then k, then v), is caught at the attention's line; cut per part, it is proved. Before
the check, both were proved under the per-part layout inferred from how the graphs cut it."""

from __future__ import annotations

import pytest
from conftest import REPO, bug_line

torch = pytest.importorskip("torch")

import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402
from torch.distributed._functional_collectives import all_reduce  # noqa: E402

from scalify.api import check_equivalent  # noqa: E402

THIS = REPO / "tests" / "test_input_values.py"
TP, HIDDEN, WIDTH = 2, 16, 8  # q, k and v are each WIDTH wide


class FusedQKV(nn.Module):
    """q * k + v from one fused projection, then the output projection; on a device, its
    block of each part, and the partial sums of the output all-reduced."""

    def __init__(self, w_qkv: torch.Tensor, w_o: torch.Tensor, width: int) -> None:
        super().__init__()
        self.qkv = nn.Parameter(w_qkv.clone())
        self.o = nn.Parameter(w_o.clone())
        self.width = width

    def forward(self, x):
        q, k, v = (x @ self.qkv.T).split(self.width, dim=-1)  # BUG: host_cut
        y = (q * k + v) @ self.o.T
        return y if self.width == WIDTH else all_reduce(y, "sum", dist.group.WORLD)


def _weights(cut: str):
    torch.manual_seed(0)
    w, w_o = torch.randn(3 * WIDTH, HIDDEN), torch.randn(HIDDEN, WIDTH)
    n = WIDTH // TP
    if cut == "per_part":  # rank 0's block of q, of k and of v
        local = torch.cat([w[p * WIDTH : p * WIDTH + n] for p in range(3)])
    else:  # rank 0's block of the fused rows, as torch.tensor_split cuts it on the host
        local = torch.tensor_split(w, TP)[0]
    return FusedQKV(w, w_o, WIDTH), FusedQKV(local, w_o[:, :n], n)


def test_a_weight_cut_per_part_is_proved_with_its_layout_checked() -> None:
    base, model = _weights("per_part")
    report = check_equivalent(base, model, mesh=f"tp={TP}", example_inputs=(torch.randn(4, 16),))
    assert report.verdict == "equivalent", report.suspects[:1]
    qkv = next(r for r in report.relations["inputs"] if r.startswith("qkv:"))
    assert "parts=[8, 8, 8]" in qkv and "checked against the device's values" in qkv


def test_a_fused_weight_cut_on_the_host_is_caught_at_the_attention() -> None:
    base, model = _weights("host_cut")
    report = check_equivalent(base, model, mesh=f"tp={TP}", example_inputs=(torch.randn(4, 16),))
    assert report.verdict == "not_equivalent" and report.counterexample
    first = report.suspects[0]
    assert (first.file, first.line) == ("tests/test_input_values.py", bug_line("host_cut", THIS))
    assert any("is contradicted by device 0's value" in n for n in report.notes)


def test_a_weight_no_inferred_layout_holds_is_never_proved() -> None:
    """Weights the parallel model holds that are no block of the baseline's: the programs
    are equal under the shapes' layout, but not for these values, so not `equivalent`."""
    base, model = _weights("per_part")
    with torch.no_grad():
        model.o.mul_(2.0)
    report = check_equivalent(base, model, mesh=f"tp={TP}", example_inputs=(torch.randn(4, 16),))
    assert report.verdict == "unknown"
    assert any("the values contradict" in n for n in report.notes)
