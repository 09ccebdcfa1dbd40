"""A device's positions in a sequence split over it: its count plus its block's offset is its
block of the whole count; an offset by the wrong stride is no block of it."""

from __future__ import annotations

from pathlib import Path

import pytest

from scalify.verify import verify_files

RULES = Path(__file__).resolve().parents[1] / "rules"

BASELINE = """HloModule base
ENTRY main {
  x = s32[16] parameter(0), sharding={devices=[2]<=[2]}
  i = s32[16] iota(), iota_dimension=0
  ROOT y = s32[16] add(x, i), sharding={devices=[2]<=[2]}
}
"""

DISTRIBUTED = """HloModule dist, num_partitions=2
ENTRY main {
  x = s32[8] parameter(0), sharding={devices=[2]<=[2]}
  i = s32[8] iota(), iota_dimension=0
  p = u32[] partition-id()
  c = s32[] convert(p)
  k = s32[] constant(STEP)
  o = s32[] multiply(c, k)
  b = s32[8] broadcast(o), dimensions={}
  positions = s32[8] add(i, b)
  ROOT y = s32[8] add(x, positions)
}
"""


@pytest.mark.parametrize("step, verdict", [(8, "equivalent"), (4, "not_equivalent")])
def test_a_count_offset_by_the_device_s_block(tmp_path, step, verdict):
    (tmp_path / "b.hlo").write_text(BASELINE)
    (tmp_path / "d.hlo").write_text(DISTRIBUTED.replace("STEP", str(step)))
    report = verify_files(str(tmp_path / "b.hlo"), str(tmp_path / "d.hlo"), RULES, mesh="sp=2")
    assert report.verdict == verdict, [s.reason for s in report.suspects[:2]]
