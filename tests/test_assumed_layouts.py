"""An `equivalent` that rests on an input layout Scalify inferred (from shapes, from how both
programs cut a fused weight) and that nothing stated or confirmed is its own outcome:
`equivalent, assuming`, exit code 3, with the layouts named and the relations entry that
states them. A weight cut otherwise on the host is a bug the graphs alone cannot show."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import REPO, run_cli

BASELINE = """HloModule base
ENTRY main {
  x = f32[4,16] parameter(0)
  w = f32[16,32] parameter(1)
  ROOT y = f32[4,32] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""
# column-parallel, with no sharding annotations: w's layout can only be read from shapes
DISTRIBUTED = """HloModule dist
ENTRY main {
  x = f32[4,16] parameter(0)
  w = f32[16,16] parameter(1)
  d = f32[4,16] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT y = f32[4,32] all-gather(d), replica_groups={{0,1}}, dimensions={1}
}
"""


@pytest.fixture
def pair(tmp_path: Path) -> list[str]:
    (tmp_path / "base.hlo").write_text(BASELINE)
    (tmp_path / "dist.hlo").write_text(DISTRIBUTED)
    return [str(tmp_path / "base.hlo"), str(tmp_path / "dist.hlo")]


def _verify(pair: list[str], *options: str):
    return run_cli("verify", *pair, "--rules", str(REPO / "rules"), "--mesh", "tp=2", *options)


def test_a_proof_on_a_layout_read_from_shapes_says_so(pair):
    result = _verify(pair)
    assert result.code == 3, result.out + result.err
    assert result.out.startswith("verdict: equivalent, assuming")
    assert "  w: shard(1, tp) (inferred from shapes)" in result.out
    assert 'state them with --relations: {"inputs": {"w": "shard(1, tp)"}}' in result.out


def test_the_json_and_sarif_reports_carry_the_assumption(pair):
    report = json.loads(_verify(pair, "--format", "json").out)
    assert report["verdict"] == "equivalent"
    assert report["assumptions"] == ["w: shard(1, tp) (inferred from shapes)"]
    sarif = json.loads(_verify(pair, "--format", "sarif").out)
    (result,) = sarif["runs"][0]["results"]
    assert result["ruleId"] == "scalify/assumed_layout" and "shard(1, tp)" in str(result)


def test_the_stated_layout_makes_it_a_plain_equivalent(pair, tmp_path):
    relations = tmp_path / "relations.json"
    relations.write_text(json.dumps({"inputs": {"w": "shard(1, tp)"}}))
    result = _verify(pair, "--relations", str(relations))
    assert result.code == 0 and result.out.startswith("verdict: equivalent\n"), result.out
    assert "assuming" not in result.out
