"""Megatron sequence parallelism (examples/sp), exported by JAX in the run: the all-gather and
reduce-scatter along the sequence verify with the tensor-parallel rules, and each bug is
caught at its line."""

from __future__ import annotations

import json

import pytest
from conftest import REPO, exported_at
from conftest import bug_line as example_bug_line

pytest.importorskip("jax")

SP = REPO / "examples" / "sp"


def bug_line(name: str) -> int:
    return example_bug_line(name, SP / "model.py")


exported = exported_at("sp", "tp")


def test_sequence_parallel_block_verifies(cli, exported):
    result = cli(
        "verify", str(exported / "baseline.hlo"), str(exported / "sp.hlo"), "--format", "json"
    )
    report = json.loads(result.out)
    assert (result.code, report["verdict"]) == (0, "equivalent")
    assert report["outputs"][0]["proven"] == "shard(1, tp)"
    assert {"all_gather_of_shard", "reduce_scatter_of_partial"} <= set(
        report["stats"]["rules_fired"]
    )


@pytest.mark.parametrize(
    "bug", ["slice_instead_of_reduce_scatter", "all_reduce_before_reduce_scatter"]
)
def test_bug_is_caught_at_its_line(cli, exported, bug):
    result = cli(
        "verify",
        str(exported / "baseline.hlo"),
        str(exported / f"sp_{bug}.hlo"),
        "--format",
        "json",
    )
    report = json.loads(result.out)
    assert result.code == 1 and report["verdict"] == "not_equivalent"
    first = report["suspects"][0]
    assert (first["file"], first["line"]) == ("examples/sp/model.py", bug_line(bug))


def test_a_norm_changed_before_its_all_gather_is_blamed_at_the_norm(exported):
    """The sequence shard's RMSNorm with its mean's division turned around: the all-gather
    then gives every device the same wrong value, and the suspect is the division (the
    norm's line), not the all-gather that collected it."""
    from scalify.compiler.compile import compile_rule_dir

    from scalify.frontends import load_graph
    from scalify.verify import choose_mesh, verify_graphs

    base = load_graph(str(exported / "baseline.hlo"))
    dist = load_graph(str(exported / "sp.hlo"))
    norm_line = next(
        i for i, t in enumerate((SP / "model.py").read_text().splitlines(), 1) if "rsqrt" in t
    )
    (div,) = [
        n
        for n in dist.nodes.values()
        if n.op == "div" and n.loc is not None and n.loc.line == norm_line
    ]
    div.operands = div.operands[::-1]
    mesh = choose_mesh(None, dist, None)  # the mesh the program was partitioned over
    report = verify_graphs(base, dist, compile_rule_dir(REPO / "rules"), mesh)
    assert report.verdict != "equivalent"
    first = report.suspects[0]
    assert (first.file.endswith("examples/sp/model.py"), first.line) == (True, norm_line), first
