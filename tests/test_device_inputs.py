"""Inputs only one graph has: a distributed program that takes its device index (or a
per-device constant) as an argument is verified once the relations file says what that input
holds; an undeclared one is refused with the declaration that would pair it; an input a
program declares but never reads pairs with the other program's, which reads it."""

from __future__ import annotations

import json

import pytest
from conftest import REPO, run_cli, verify_json, verify_texts

BASE = """HloModule base
ENTRY main {
  x = f32[4,16] parameter(0), metadata={op_name="x"}
  w = f32[16,8] parameter(1), metadata={op_name="w"}
  ROOT y = f32[4,8] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""

# Each device takes its block of columns of the replicated `w`: it starts at rank * 2.
RANKED = """HloModule dist, num_partitions={devices}
ENTRY main {{
  x = f32[4,16] parameter(0), metadata={{op_name="x"}}
  w = f32[16,8] parameter(1), metadata={{op_name="w"}}
  rank = s32[] parameter(2), metadata={{op_name="rank"}}
  block = s32[] constant({block})
  offset = s32[] multiply(rank, block)
  zero = s32[] constant(0)
  mine = f32[16,2] dynamic-slice(w, zero, offset), dynamic_slice_sizes={{16,2}}
  ROOT y = f32[4,2] dot(x, mine), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
}}
"""
OUTPUTS = ["shard(1, tp)"]


def ranked(block: int = 2, devices: int = 4) -> str:
    return RANKED.format(block=block, devices=devices)


def test_a_rank_argument_declared_as_the_device_id_is_proved(tmp_path):
    relations = {"inputs": {"rank": "device_id"}, "outputs": OUTPUTS}
    report = verify_texts(tmp_path, BASE, ranked(), relations, "tp=4")
    assert report.verdict == "equivalent", report.suspects[:1]
    assert any(
        "input `rank` holds the device's row-major id on mesh tp=4" in n for n in report.notes
    )


def test_a_rank_argument_times_a_wrong_block_is_caught(tmp_path):
    relations = {"inputs": {"rank": "device_id"}, "outputs": OUTPUTS}
    report = verify_texts(tmp_path, BASE, ranked(block=3), relations, "tp=4")
    assert report.verdict == "not_equivalent"
    assert report.counterexample.startswith("output 0 on device 1")  # device 0 reads block 0


def test_the_numeric_run_reads_the_declared_rank(tmp_path):
    """`scalify simulate` substitutes the declaration too: block 3 differs, block 2 agrees."""
    (tmp_path / "rel.json").write_text(
        json.dumps({"inputs": {"rank": "device_id"}, "outputs": OUTPUTS})
    )
    (tmp_path / "base.hlo").write_text(BASE)
    codes = []
    for block in (2, 3):
        (tmp_path / "dist.hlo").write_text(ranked(block))
        args = ("--mesh", "tp=4", "--relations", str(tmp_path / "rel.json"))
        result = run_cli("simulate", str(tmp_path / "base.hlo"), str(tmp_path / "dist.hlo"), *args)
        codes.append(result.code)
    assert codes == [0, 1]


# The coordinate on `tp` of a dp=2 x tp=4 mesh, plus a step offset that is 0 everywhere.
COORDINATE = """HloModule dist, num_partitions=8
ENTRY main {
  x = f32[4,16] parameter(0), metadata={op_name="x"}
  w = f32[16,8] parameter(1), metadata={op_name="w"}
  rank = s32[] parameter(2), metadata={op_name="rank"}
  step = s32[] parameter(3), metadata={op_name="step"}
  two = s32[] constant(2)
  scaled = s32[] multiply(rank, two)
  offset = s32[] add(scaled, step)
  zero = s32[] constant(0)
  mine = f32[16,2] dynamic-slice(w, zero, offset), dynamic_slice_sizes={16,2}
  ROOT y = f32[4,2] dot(x, mine), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""


@pytest.mark.parametrize(
    "rank, step, verdict",
    [
        ("device_id(tp)", "constant(0)", "equivalent"),
        ("device_id(dp)", "constant(0)", "not_equivalent"),  # the other axis's coordinate
        ("device_id(tp)", "constant(2)", "not_equivalent"),  # every block one further
    ],
)
def test_an_axis_coordinate_and_a_constant(tmp_path, rank, step, verdict):
    relations = {"inputs": {"rank": rank, "step": step}, "outputs": OUTPUTS}
    report = verify_texts(tmp_path, BASE, COORDINATE, relations, "dp=2,tp=4")
    assert report.verdict == verdict, report.suspects[:1]


OFFSET = """HloModule dist, num_partitions=4
ENTRY main {
  x = f32[4,16] parameter(0), metadata={op_name="x"}
  w = f32[16,8] parameter(1), metadata={op_name="w"}
  offset = s32[] parameter(2), metadata={op_name="offset"}
  zero = s32[] constant(0)
  mine = f32[16,2] dynamic-slice(w, zero, offset), dynamic_slice_sizes={16,2}
  ROOT y = f32[4,2] dot(x, mine), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""


@pytest.mark.parametrize(
    "values, verdict", [("0, 2, 4, 6", "equivalent"), ("0, 2, 6, 4", "not_equivalent")]
)
def test_a_per_device_offset(tmp_path, values, verdict):
    relations = {"inputs": {"offset": f"per_device([{values}])"}, "outputs": OUTPUTS}
    report = verify_texts(tmp_path, BASE, OFFSET, relations, "tp=4")
    assert report.verdict == verdict, report.suspects[:1]


def run(tmp_path, relations: dict | None, dist: str = "", base: str = BASE):
    """`scalify verify` on BASE and `dist` (the ranked program by default), with `relations`
    written to r.json when given."""
    (tmp_path / "base.hlo").write_text(base)
    (tmp_path / "dist.hlo").write_text(dist or ranked())
    options = ["--mesh", "tp=4"]
    if relations is not None:
        (tmp_path / "r.json").write_text(json.dumps(relations))
        options += ["--relations", str(tmp_path / "r.json")]
    return run_cli("verify", str(tmp_path / "base.hlo"), str(tmp_path / "dist.hlo"), *options)


def test_an_undeclared_rank_is_refused_with_its_declaration(tmp_path):
    result = run(tmp_path, {"outputs": OUTPUTS})
    assert result.code == 2 and "Traceback" not in result.err
    assert "cannot be paired: the distributed input `rank` has no baseline input" in result.err
    assert 'in the --relations file, e.g. {"inputs": {"rank": "device_id"}}' in result.err


@pytest.mark.parametrize(
    "declared, expected",
    [
        ("device_index", "expected device_id, device_id(AXIS), constant(V) or per_device("),
        ("shard(0, tp)", "`rank` is an input only the distributed graph has"),
        ("device_id(dp)", "axis 'dp' is not in mesh tp=4"),
        ("constant(1.5)", "the input is s32[], an integer type; expected integer values"),
        ("constant(true)", "the input is s32[], an integer type; expected integer values"),
        ("per_device([0, 2])", "2 values, but mesh tp=4 has 4 devices"),
        ("constant(2147483648)", "the input is s32[], which holds -2147483648 to 2147483647"),
        ("per_device(0, 2, 4, 6)", "expected device_id, device_id(AXIS), constant(V)"),
    ],
)
def test_a_bad_declaration_is_refused(tmp_path, declared, expected):
    result = run(tmp_path, {"inputs": {"rank": declared}, "outputs": OUTPUTS})
    assert result.code == 2 and "Traceback" not in result.err
    assert result.err.startswith(f"{tmp_path / 'r.json'}: input rank: error: bad declaration")
    assert expected in result.err


def test_a_device_value_for_an_input_both_graphs_have_is_refused(tmp_path):
    result = run(tmp_path, {"inputs": {"rank": "device_id", "w": "device_id"}})
    assert result.code == 2
    assert "r.json: input w: error: 'device_id' declares what an input only the" in result.err
    assert "the baseline has an input `w` too" in result.err


# One program declares `bias` and never reads it (its loader drops it); the other reads it.
UNREAD_BASE = BASE.replace(
    "  ROOT y", '  bias = f32[4,8] parameter(2), metadata={op_name="bias"}\n  ROOT y'
)
BIASED = """HloModule dist, num_partitions=4
ENTRY main {
  x = f32[4,16] parameter(0), metadata={op_name="x"}
  w = f32[16,2] parameter(1), metadata={op_name="w"}
  bias = f32[4,2] parameter(2), metadata={op_name="bias"}
  d = f32[4,2] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT y = f32[4,2] add(d, bias)
}
"""


BIASED_BASE = """HloModule base
ENTRY main {
  x = f32[4,16] parameter(0), metadata={op_name="x"}
  w = f32[16,8] parameter(1), metadata={op_name="w"}
  bias = f32[4,8] parameter(2), metadata={op_name="bias"}
  d = f32[4,8] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT y = f32[4,8] add(d, bias)
}
"""
UNBIASED = BIASED.replace(
    "  d = f32[4,2] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
    "  ROOT y = f32[4,2] add(d, bias)",
    "  ROOT y = f32[4,2] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}",
)


@pytest.mark.parametrize(
    "base, dist, side",
    [
        (UNREAD_BASE, BIASED, "baseline"),
        (BIASED_BASE, UNBIASED, "distributed"),
    ],
    ids=["baseline_never_reads", "distributed_never_reads"],
)
def test_an_input_one_graph_never_reads_pairs_by_name(tmp_path, base, dist, side):
    """A bias one program adds and the other declares but does not add is a bug found with a
    counterexample, not an input that cannot be paired."""
    options = ("--mesh", "tp=4", "--relations", _outputs(tmp_path))
    code, report = verify_json(*_written(tmp_path, base, dist), *options)
    assert (code, report["verdict"]) == (1, "not_equivalent")
    assert report["counterexample"]
    assert "bias: shard(1, tp) (inferred from shapes)" in report["relations"]["inputs"]
    kept = f"the {side} graph declares input `bias` but never reads it"
    assert any(kept in note for note in report["notes"])


def _written(tmp_path, base: str, dist: str):
    (tmp_path / "base.hlo").write_text(base)
    (tmp_path / "dist.hlo").write_text(dist)
    return tmp_path / "base.hlo", tmp_path / "dist.hlo"


def _outputs(tmp_path) -> str:
    (tmp_path / "out.json").write_text(json.dumps({"outputs": OUTPUTS}))
    return str(tmp_path / "out.json")


def test_the_relations_reference_documents_the_declarations():
    text = (REPO / "docs" / "reference" / "relations.md").read_text()
    for form in ("device_id(AXIS)", "constant(V)", "per_device([V0, V1, ...])"):
        assert form in text
