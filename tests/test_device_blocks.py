"""A device's block computed from its bare device id on a one-axis job (`pid * c`): the
one-hot of its local index is its slice of the baseline's one-hot (test_block_iotas.py does
the same for a count), and one with a wrong block size is not."""

from __future__ import annotations

from pathlib import Path

import pytest

from scalify.verify import verify_files

RULES = Path(__file__).resolve().parents[1] / "rules"

BASELINE = """HloModule base
ENTRY main {
  ids = s32[4] parameter(0)
  b = s32[4,8] broadcast(ids), dimensions={0}
  i = s32[4,8] iota(), iota_dimension=1
  hot = pred[4,8] compare(b, i), direction=EQ
  ROOT f = f32[4,8] convert(hot), sharding={devices=[1,2]<=[2]}
}
"""

DISTRIBUTED = """HloModule dist, num_partitions=2
ENTRY main {
  ids = s32[4] parameter(0)
  p = u32[] partition-id()
  c = s32[] convert(p)
  k = s32[] constant(BLOCK)
  o = s32[] multiply(c, k)
  ob = s32[4] broadcast(o), dimensions={}
  local = s32[4] subtract(ids, ob)
  b = s32[4,4] broadcast(local), dimensions={0}
  i = s32[4,4] iota(), iota_dimension=1
  hot = pred[4,4] compare(b, i), direction=EQ
  ROOT f = f32[4,4] convert(hot)
}
"""


@pytest.mark.parametrize("block, verdict", [(4, "equivalent"), (2, "not_equivalent")])
def test_a_one_hot_of_the_local_index_from_the_device_id(tmp_path, block, verdict):
    (tmp_path / "b.hlo").write_text(BASELINE)
    (tmp_path / "d.hlo").write_text(DISTRIBUTED.replace("BLOCK", str(block)))
    report = verify_files(str(tmp_path / "b.hlo"), str(tmp_path / "d.hlo"), RULES, mesh="tp=2")
    assert report.verdict == verdict, [s.reason for s in report.suspects[:2]]
