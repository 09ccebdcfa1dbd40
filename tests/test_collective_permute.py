"""A collective permute that exchanges two axes' device coordinates (XLA's transpose of the
fsdp and tensor devices) moves each placement to the other axis: a shard over fsdp becomes
a shard over tensor, a partial sum over fsdp a partial sum over tensor. A permute that is no
such exchange, and a collective over the axis the value left, are not proved."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_cli

from scalify.mesh import parse_mesh

HERE = Path(__file__).resolve().parent / "collective_permute"
MESH = "fsdp=2,tensor=2"


def _verify(baseline: str, distributed: Path | str) -> tuple[int, dict]:
    result = run_cli(
        "verify", str(HERE / baseline), str(HERE / distributed), "--mesh", MESH, "--format", "json"
    )
    return result.code, json.loads(result.out)


def test_the_exchange_of_two_axes_is_read_from_the_pairs():
    mesh = parse_mesh(MESH)
    swap = ((0, 0), (1, 2), (2, 1), (3, 3))
    assert mesh.axis_images(swap) == {"fsdp": "tensor", "tensor": "fsdp"}
    assert mesh.axis_images(((0, 0), (1, 1), (2, 2), (3, 3))) == {
        "fsdp": "fsdp",
        "tensor": "tensor",
    }
    assert mesh.axis_images(((0, 0), (1, 3), (3, 1), (2, 2))) is None  # swaps one column only
    assert mesh.axis_images(((0, 1), (1, 2), (2, 3))) is None  # device 0 receives nothing


@pytest.mark.parametrize(
    "baseline, distributed",
    [("base.hlo", "swap.hlo"), ("dot_base.hlo", "partial_swap.hlo")],
    ids=["shard", "partial"],
)
def test_a_permuted_layout_is_gathered_over_the_axis_it_moved_to(baseline, distributed):
    code, report = _verify(baseline, distributed)
    assert (code, report["verdict"]) == (0, "equivalent"), report["suspects"][:1]


def test_a_permute_that_exchanges_no_axes_is_not_proved():
    code, report = _verify("base.hlo", "not_a_swap.hlo")
    assert report["verdict"] == "not_equivalent"
    assert report["suspects"][0]["node"] == "moved"


@pytest.mark.parametrize(
    "baseline, distributed, old, new",
    [
        ("base.hlo", "swap.hlo", "replica_groups={{0,1},{2,3}}", "replica_groups={{0,2},{1,3}}"),
        (
            "dot_base.hlo",
            "partial_swap.hlo",
            "replica_groups={{0,1},{2,3}}",
            "replica_groups={{0,2},{1,3}}",
        ),
    ],
    ids=["gather", "all_reduce"],
)
def test_a_collective_over_the_axis_the_value_left_is_caught(
    baseline, distributed, old, new, tmp_path
):
    broken = tmp_path / "broken.hlo"
    broken.write_text((HERE / distributed).read_text().replace(old, new))
    code, report = _verify(baseline, broken)
    assert report["verdict"] == "not_equivalent"
    assert report["suspects"][0]["node"] == "y"
