"""`complex`, `real` and `imag` (RoPE written as a rotation by a complex number, as EasyDeL's
Llama 4 writes it) are elementwise ops with numeric semantics: a rotation of each device's
heads proves, and one that takes the wrong part of the product is caught with a
counterexample."""

from __future__ import annotations

from conftest import verify_texts


def _rotation(heads: int, part: str) -> str:
    return f"""HloModule m
ENTRY main {{
  a = f32[2,{heads},8] parameter(0)
  b = f32[2,{heads},8] parameter(1)
  c = f32[2,8] parameter(2)
  s = f32[2,8] parameter(3)
  q = c64[2,{heads},8] complex(a, b)
  f = c64[2,8] complex(c, s)
  fb = c64[2,{heads},8] broadcast(f), dimensions={{0,2}}
  r = c64[2,{heads},8] multiply(q, fb)
  ROOT o = f32[2,{heads},8] {part}(r)
}}
"""


RELATIONS = {
    "inputs": {"a": "shard(1, tp)", "b": "shard(1, tp)", "c": "replicate", "s": "replicate"},
    "outputs": ["shard(1, tp)"],
}


def test_a_complex_rotation_of_each_devices_heads_is_proved(tmp_path):
    report = verify_texts(tmp_path, _rotation(4, "real"), _rotation(1, "real"), RELATIONS, "tp=4")
    assert report.verdict == "equivalent", [s.reason for s in report.suspects]
    assert not any("opaque" in note for note in report.notes)


def test_the_wrong_part_of_the_rotation_is_caught_with_a_counterexample(tmp_path):
    report = verify_texts(tmp_path, _rotation(4, "real"), _rotation(1, "imag"), RELATIONS, "tp=4")
    assert report.verdict == "not_equivalent"
    assert report.counterexample
