"""Bad input gets exit 2 and a message naming the file and what was expected; no traceback."""

from __future__ import annotations

import json

import pytest
from conftest import MLP

BASE = str(MLP / "hlo" / "baseline.hlo")
DIST = str(MLP / "hlo" / "tp.hlo")


def assert_clean_error(result, *fragments):
    assert result.code == 2, result.out + result.err
    assert "Traceback" not in result.err
    for fragment in fragments:
        assert fragment in result.err, result.err


def test_missing_file(cli):
    assert_clean_error(cli("verify", BASE, "nope.hlo"), "nope.hlo", "not found")


def test_truncated_hlo(cli, tmp_path):
    text = (MLP / "hlo" / "tp.hlo").read_text()
    cut = tmp_path / "cut.hlo"
    cut.write_text(text[: len(text) // 2])
    result = cli("verify", BASE, str(cut))
    assert_clean_error(result, "cut.hlo:", "error:")


def test_not_hlo(cli, tmp_path):
    other = tmp_path / "model.txt"
    other.write_text("hello\n")
    assert_clean_error(cli("verify", BASE, str(other)), "model.txt:1:1", "HloModule")


def test_unknown_op_in_rule(cli, tmp_path):
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "core.srl").write_text(
        "# frob is not an op\nrule r:\n  match frob(X)\n  rewrite frob(X) == X\n"
    )
    result = cli("verify", BASE, DIST, "--rules", str(rules))
    assert_clean_error(result, "core.srl:3:9: error: unknown op `frob`", "^")


def test_mesh_that_does_not_divide(cli):
    result = cli("verify", BASE, DIST, "--mesh", "dp=2,tp=3")
    assert_clean_error(result, "tp.hlo", "error:")


def test_bad_mesh_syntax(cli):
    assert_clean_error(cli("verify", BASE, DIST, "--mesh", "tp"), "expected NAME=SIZE")


def test_relations_file_not_json(cli, tmp_path):
    bad = tmp_path / "rel.json"
    bad.write_text("{ nope")
    assert_clean_error(cli("verify", BASE, DIST, "--relations", str(bad)), "rel.json:1:3")


def test_relations_file_unknown_input(cli, tmp_path):
    rel = tmp_path / "rel.json"
    rel.write_text(json.dumps({"inputs": {"w9": "replicate"}}))
    result = cli("verify", BASE, DIST, "--relations", str(rel))
    assert_clean_error(result, "w9", "note: its inputs: ")


@pytest.mark.parametrize(
    "relations, expected",
    [
        ({"outputs": [3]}, '"outputs"[0] is 3: expected a layout string'),
        ({"inputs": {"x": 1}}, '"inputs"["x"] is 1: expected a layout string'),
    ],
    ids=["output", "input"],
)
def test_relations_file_layout_that_is_no_string(cli, tmp_path, relations, expected):
    rel = tmp_path / "rel.json"
    rel.write_text(json.dumps(relations))
    assert_clean_error(cli("verify", BASE, DIST, "--relations", str(rel)), "rel.json", expected)


def test_usage_error(cli):
    result = cli("verify", BASE)
    assert result.code == 2
    assert "usage:" in result.err


def test_jobs_must_be_at_least_one(cli):
    hlo = MLP / "hlo"
    result = cli("verify", str(hlo / "baseline.hlo"), str(hlo / "tp.hlo"), "-j", "0")
    assert result.code == 2
    assert "at least 1" in result.err


# Malformed indexing ops: (file name, HLO body after the parameters, its line, the words
# the error must hold). Every module has an `add` combiner (lines 2-5) and parameters
# t, i and u of the shapes the body's comment gives.
_INDEXING = (
    "HloModule m\nadd {{\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
    "  ROOT c = f32[] add(a, b)\n}}\nENTRY main {{\n  t = f32[{t}] parameter(0)\n"
    "  i = s32[{i}] parameter(1)\n  u = f32[{u}] parameter(2)\n  ROOT r = {root}\n}}\n"
)
BAD_INDEXING = {
    "gather_index_vector_dim_outside": (
        ("16,4", "", "4"),
        "f32[4] gather(t, i), offset_dims={0}, collapsed_slice_dims={0}, start_index_map={0}, "
        "index_vector_dim=3, slice_sizes={1,4}",
        ("index_vector_dim=3", "expected 0..0"),
    ),
    "scatter_index_vector_dim_outside": (
        ("6,5", "3,1", "3,5"),
        "f32[6,5] scatter(t, i, u), update_window_dims={1}, inserted_window_dims={0}, "
        "scatter_dims_to_operand_dims={0}, index_vector_dim=4, to_apply=add",
        ("index_vector_dim=4", "expected 0..2"),
    ),
    "gather_unpaired_batching_dims": (
        ("2,6,5", "2,3,1", "1"),
        "f32[2,3,5] gather(t, i), offset_dims={2}, collapsed_slice_dims={1}, "
        "start_index_map={1}, operand_batching_dims={0}, index_vector_dim=2, "
        "slice_sizes={1,1,5}",
        ("1 operand batching dims but 0 indices",),
    ),
    "scatter_batching_dim_outside_the_operand": (
        ("2,6,5", "2,3,1", "2,3,5"),
        "f32[2,6,5] scatter(t, i, u), update_window_dims={2}, inserted_window_dims={1}, "
        "scatter_dims_to_operand_dims={1}, input_batching_dims={3}, "
        "scatter_indices_batching_dims={0}, index_vector_dim=2, to_apply=add",
        ("operand batching dims [3]", "expected 0..2"),
    ),
}


@pytest.mark.parametrize("name", sorted(BAD_INDEXING))
def test_malformed_gather_or_scatter_is_a_clear_error_at_its_line(cli, tmp_path, name):
    (t, i, u), root, words = BAD_INDEXING[name]
    bad = tmp_path / "indexing.hlo"
    bad.write_text(_INDEXING.format(t=t, i=i, u=u, root=root))
    result = cli("verify", str(bad), str(bad), "--mesh", "tp=1")
    assert_clean_error(result, "indexing.hlo:11:", *words)


NUMBERING = {
    "repeated": (
        "x = f32[4] parameter(0)\n  y = f32[4] parameter(0)",
        "bad.hlo:5:3: error: parameter(0) is declared twice in computation 'main' (first as 'x')",
    ),
    "gap": (
        "x = f32[4] parameter(0)\n  y = f32[4] parameter(2)",
        "bad.hlo:5:3: error: computation 'main' has 2 parameters but no parameter(1)",
    ),
}


@pytest.mark.parametrize("case", sorted(NUMBERING))
def test_parameter_numbers_with_gaps_or_repeats_are_refused(cli, tmp_path, case):
    """Two parameters with one number would be read as two inputs; a gap leaves an operand
    of the computation without a name."""
    params, message = NUMBERING[case]
    bad = tmp_path / "bad.hlo"
    bad.write_text(f"HloModule bad\n\nENTRY main {{\n  {params}\n  ROOT z = f32[4] add(x, y)\n}}\n")
    assert_clean_error(cli("verify", str(bad), str(bad)), message)


def test_a_call_to_a_computation_that_does_not_exist_is_refused(cli, tmp_path):
    bad = tmp_path / "bad.hlo"
    bad.write_text(
        "HloModule bad\n\nENTRY main {\n  x = f32[4] parameter(0)\n"
        "  ROOT z = f32[] reduce(x, x), dimensions={0}, to_apply=%nothere\n}\n"
    )
    assert_clean_error(cli("verify", str(bad), str(bad)), "bad.hlo:5:8", "names no computation")


def test_a_gzipped_graph_that_is_no_gzip_is_refused(cli, tmp_path):
    bad = tmp_path / "graph.hlo.gz"
    bad.write_text("HloModule not_compressed\n")
    assert_clean_error(cli("verify", BASE, str(bad)), "graph.hlo.gz", "cannot read graph file")


def test_a_shard_map_region_in_an_unpartitioned_program_is_refused(cli, tmp_path):
    """A global program holding a manual region (EasyDeL's shard_map attention, Qwen3-Next's
    linear attention) changes shapes at SPMDFullToShardShape: a clean error at that custom
    call, not an identity whose shapes disagree with what reads it (an internal error)."""
    manual = tmp_path / "manual.hlo"
    manual.write_text(
        "HloModule m\n"
        "ENTRY main {\n"
        "  x = f32[8,16] parameter(0), sharding={devices=[1,2]<=[2]}\n"
        '  l = f32[8,8] custom-call(x), custom_call_target="SPMDFullToShardShape", '
        "sharding={manual}\n"
        "  r = f32[64] reshape(l)\n"
        "  s = f32[8,8] reshape(r)\n"
        '  ROOT g = f32[8,16] custom-call(s), custom_call_target="SPMDShardToFullShape", '
        "sharding={devices=[1,2]<=[2]}\n"
        "}\n"
    )
    result = cli("verify", str(manual), str(manual), "--mesh", "tp=2")
    assert_clean_error(result, "manual.hlo:4:3", "custom-call `l`", "shard_map")


@pytest.mark.parametrize(
    "operands, branches, message",
    [
        ("x, x", "{%nothere, %nothere}", "%nothere names no computation"),
        ("x", "{%same, %same}", "one operand per branch computation expected"),
    ],
    ids=["missing_branch", "operand_count"],
)
def test_a_conditional_that_cannot_be_read_is_refused(cli, tmp_path, operands, branches, message):
    bad = tmp_path / "bad.hlo"
    bad.write_text(
        "HloModule bad\n\nsame {\n  a = f32[4] parameter(0)\n  ROOT b = f32[4] negate(a)\n}\n\n"
        "ENTRY main {\n  x = f32[4] parameter(0)\n  i = s32[] parameter(1)\n"
        f"  ROOT z = f32[4] conditional(i, {operands}), branch_computations={branches}\n}}\n"
    )
    assert_clean_error(cli("verify", str(bad), str(bad)), "bad.hlo:11:8", message)


@pytest.mark.parametrize(
    "pairs, message",
    [
        ("{0,1}", "lists no pair"),  # one brace level: no pair at all
        ("{{0,5}}", "names a device outside the module's 2 partitions"),
    ],
    ids=["no_pair", "device_out_of_range"],
)
def test_a_permute_whose_pairs_cannot_be_read_is_refused(cli, tmp_path, pairs, message):
    bad = tmp_path / "bad.hlo"
    bad.write_text(
        "HloModule bad, num_partitions=2\n\nENTRY main {\n  x = f32[4] parameter(0)\n"
        f"  ROOT y = f32[4] collective-permute(x), source_target_pairs={pairs}\n}}\n"
    )
    assert_clean_error(cli("verify", str(bad), str(bad), "--mesh", "tp=2"), "bad.hlo:5:", message)


def test_an_input_only_the_distributed_graph_has_is_named(cli, tmp_path):
    """A per-device rank passed as an argument: the error names that input, not just the
    counts, and gives the relations file entry that would declare it."""
    base, dist = tmp_path / "base.hlo", tmp_path / "dist.hlo"
    params = '  x = f32[8] parameter(0), metadata={op_name="x"}\n'
    base.write_text(f"HloModule base\nENTRY main {{\n{params}  ROOT y = f32[8] negate(x)\n}}\n")
    dist.write_text(
        "HloModule dist, num_partitions=2\nENTRY main {\n"
        f'{params}  rank = s32[] parameter(1), metadata={{op_name="rank"}}\n'
        "  r = f32[] convert(rank)\n  b = f32[8] broadcast(r), dimensions={}\n"
        "  n = f32[8] negate(x)\n  ROOT y = f32[8] add(n, b)\n}\n"
    )
    result = cli("verify", str(base), str(dist), "--mesh", "tp=2")
    assert_clean_error(
        result,
        "dist.hlo: error: the baseline has 1 inputs and the distributed graph has 2; they "
        "cannot be paired: the distributed input `rank` has no baseline input of its name",
        '{"inputs": {"rank": "device_id"}}',
    )
