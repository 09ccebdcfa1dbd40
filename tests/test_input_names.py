"""Inputs whose names repeat (compiled HLO calls every parameter `param`) stay distinct: a
swap of two of them is never proved, and the correct program still is."""

from __future__ import annotations

import json

from conftest import verify_json

BODY = """HloModule {name}, num_partitions=4
ENTRY main {{
  a = f32[8] parameter(0), metadata={{op_name="param"}}
  b = f32[8] parameter(1), metadata={{op_name="param"}}
  ROOT d = f32[8] subtract({x}, {y})
}}
"""


def write(tmp_path, name: str, x: str, y: str):
    path = tmp_path / f"{name}.hlo"
    path.write_text(BODY.format(name=name, x=x, y=y))
    return path


def test_swapped_inputs_with_one_name_are_not_proved(tmp_path):
    base = write(tmp_path, "base", "a", "b")
    code, report = verify_json(base, write(tmp_path, "swapped", "b", "a"))
    assert code == 1 and report["verdict"] == "not_equivalent"


def test_inputs_with_one_name_still_verify(tmp_path):
    base = write(tmp_path, "base", "a", "b")
    code, report = verify_json(base, write(tmp_path, "same", "a", "b"))
    assert (code, report["verdict"]) == (0, "equivalent")


# XLA's SPMD partitioner names the parameters it makes `param`, `param.1`, ... in the order
# it visits them, not by parameter number, and writes no argument name when the metadata
# was stripped.
PARTITIONED_BASE = """HloModule base
ENTRY main {
  param = f32[8,16] parameter(0)
  param.1 = f32[16,4] parameter(1)
  ROOT d = f32[8,4] dot(param, param.1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""
PARTITIONED = """HloModule dist, num_partitions=4
ENTRY main {
  %param.1 = f32[8,16] parameter(0)
  %param = f32[16,1] parameter(1)
  ROOT %d = f32[8,1] dot(%param.1, %param), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""


def partitioned(tmp_path, relations: dict | None = None) -> tuple[int, dict]:
    base, dist = tmp_path / "base.hlo", tmp_path / "dist.hlo"
    base.write_text(PARTITIONED_BASE)
    dist.write_text(PARTITIONED)
    options = ["--mesh", "tp=4"]
    if relations is not None:
        (tmp_path / "rel.json").write_text(json.dumps(relations))
        options += ["--relations", str(tmp_path / "rel.json")]
    return verify_json(base, dist, *options)


def test_numbered_parameters_keep_their_numbers(tmp_path):
    """`param.1` is not listed as `param`: the report tells the inputs apart, and they still
    pair by position (the baseline's `param.1` is the distributed `param`)."""
    code, report = partitioned(tmp_path, {"outputs": ["shard(1, tp)"]})
    assert (code, report["verdict"]) == (3, "equivalent")  # `param`'s layout is inferred
    assert report["relations"]["inputs"] == [
        "param.1: replicate (inferred from shapes)",
        "param: shard(1, tp) (inferred from shapes)",
    ]
    assert report["assumptions"] == ["param: shard(1, tp) (inferred from shapes)"]


def test_a_relations_file_names_one_numbered_parameter(tmp_path):
    """`param` in a relations file is that one parameter, not whichever comes first."""
    stated = {"inputs": {"param": "shard(1, tp)", "param.1": "replicate"}}
    code, report = partitioned(tmp_path, {**stated, "outputs": ["shard(1, tp)"]})
    assert (code, report["verdict"]) == (0, "equivalent")
    assert report["relations"]["inputs"] == [
        "param.1: replicate (relations file)",
        "param: shard(1, tp) (relations file)",
    ]
