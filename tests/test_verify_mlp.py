"""End to end from the CLI on the bundled MLP example: verdicts, suspects, lines, JSON."""

from __future__ import annotations

import json

import pytest
from conftest import MLP, bug_line, line_of

HLO = MLP / "hlo"
BASE = str(HLO / "baseline.hlo")


def test_correct_tp_mlp_is_equivalent(cli):
    result = cli("verify", BASE, str(HLO / "tp.hlo"), "--rules", "rules/")
    assert result.code == 0, result.out + result.err
    assert "verdict: equivalent" in result.out
    assert "proven shard(0, dp); required shard(0, dp)" in result.out
    assert "w1: shard(1, tp) (annotation)" in result.out
    assert "b2: replicate (annotation)" in result.out


EXPECTED = {
    "bias_before_allreduce": ("add", bug_line("bias_before_allreduce"), "counted 4 times"),
    "wrong_groups": ("all_reduce", bug_line("wrong_groups"), "wrong devices"),
    # No op is computed on the BUG line itself: the unreduced value is first misused where
    # b2 is added, so that is the line to report.
    "missing_allreduce": ("add", line_of("return y + b2"), "all-reduce over tp missing"),
    "double_allreduce": ("all_reduce", bug_line("double_allreduce"), "applied twice"),
}


@pytest.mark.parametrize("bug", sorted(EXPECTED))
def test_broken_variant_is_caught_at_its_line(cli, bug):
    op, line, words = EXPECTED[bug]
    result = cli("verify", BASE, str(HLO / f"tp_{bug}.hlo"), "--format", "json")
    assert result.code == 1, result.out + result.err
    report = json.loads(result.out)
    assert report["verdict"] == "not_equivalent"
    first = report["suspects"][0]
    assert (first["op"], first["file"], first["line"]) == (op, "examples/mlp/model.py", line)
    assert first["function"] == "tp_mlp"
    assert words in first["reason"]


def test_json_has_the_contract_fields(cli):
    result = cli("verify", BASE, str(HLO / "tp.hlo"), "--format", "json")
    report = json.loads(result.out)
    assert report["verdict"] == "equivalent"
    assert set(report) >= {"verdict", "outputs", "suspects", "relations", "stats"}
    assert report["outputs"][0]["proven"] == "shard(0, dp)"
    assert any(r.startswith("x: shard(0, dp)") for r in report["relations"]["inputs"])
    stats = report["stats"]
    assert {"seconds", "egraph_nodes", "rules_fired", "partitions", "memo_hits"} <= set(stats)
    assert stats["rules_fired"]["dot_contracted_shards"] >= 1


def test_report_written_to_file(cli, tmp_path):
    target = tmp_path / "report.json"
    result = cli("verify", BASE, str(HLO / "tp.hlo"), "--format", "json", "-o", str(target))
    assert result.code == 0
    assert json.loads(target.read_text())["verdict"] == "equivalent"


def test_relations_file_overrides_annotations(cli, tmp_path):
    relations = tmp_path / "rel.json"
    # Claim w2 is column-sharded: its local shape then contradicts the graph.
    relations.write_text(json.dumps({"inputs": {"w2": "shard(1, tp)"}}))
    result = cli("verify", BASE, str(HLO / "tp.hlo"), "--relations", str(relations))
    assert result.code == 2
    assert "input w2" in result.err and "local shape" in result.err


def test_wrong_but_consistent_relations_are_not_proved(cli, tmp_path):
    relations = tmp_path / "rel.json"
    # b1 is really sharded on tp; claiming it replicated is inconsistent with its local shape,
    # so use the mesh swap instead: dp and tp exchanged make every shard land on wrong devices.
    relations.write_text(
        json.dumps(
            {
                "mesh": "dp=2,tp=4",
                "inputs": {"w1": "shard(1, tp)", "w2": "shard(0, tp)"},
                "outputs": ["replicate"],
            }
        )
    )
    result = cli("verify", BASE, str(HLO / "tp.hlo"), "--relations", str(relations))
    assert result.code == 1
    assert "required replicate" in result.out


def test_sarif_points_at_the_bug(cli):
    result = cli("verify", BASE, str(HLO / "tp_bias_before_allreduce.hlo"), "--format", "sarif")
    assert result.code == 1
    sarif = json.loads(result.out)
    assert sarif["version"] == "2.1.0"
    (run,) = sarif["runs"]
    assert run["properties"]["verdict"] == "not_equivalent"
    location = run["results"][0]["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uri"] == "examples/mlp/model.py"
    assert location["region"]["startLine"] == EXPECTED["bias_before_allreduce"][1]
    assert run["results"][0]["level"] == "error"


def test_sarif_of_an_equivalent_pair_has_no_results(cli):
    sarif = json.loads(cli("verify", BASE, str(HLO / "tp.hlo"), "--format", "sarif").out)
    assert sarif["runs"][0]["results"] == []


def test_quiet_prints_the_verdict_line_only(cli):
    result = cli("verify", BASE, str(HLO / "tp_wrong_groups.hlo"), "-q")
    assert result.code == 1
    assert (
        result.out
        == f"verdict: not_equivalent (examples/mlp/model.py:{bug_line('wrong_groups')})\n"
    )
