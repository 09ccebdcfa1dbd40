"""Inputs whose names repeat (compiled HLO calls every parameter `param`) stay distinct: a
swap of two of them is never proved, and the correct program still is."""

from __future__ import annotations

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
