"""A device's block computed from its bare device id on a one-axis job (`pid * c`): its
count of a sequence block (`iota(k) + k * pid`) and the one-hot of its local index
(`one_hot(i - c * pid)`) are its slices of the baseline's; an offset by the wrong stride is
no block of them."""

from __future__ import annotations

from pathlib import Path

import pytest

from scalify.verify import verify_files

RULES = Path(__file__).resolve().parents[1] / "rules"

# the device's offset, pid * STEP, as a one-axis job computes it
OFFSET = """  p = u32[] partition-id()
  c = s32[] convert(p)
  k = s32[] constant(STEP)
  o = s32[] multiply(c, k)"""

COUNT = (
    """HloModule base
ENTRY main {
  x = s32[16] parameter(0), sharding={devices=[2]<=[2]}
  i = s32[16] iota(), iota_dimension=0
  ROOT y = s32[16] add(x, i), sharding={devices=[2]<=[2]}
}
""",
    f"""HloModule dist, num_partitions=2
ENTRY main {{
  x = s32[8] parameter(0), sharding={{devices=[2]<=[2]}}
  i = s32[8] iota(), iota_dimension=0
{OFFSET}
  b = s32[8] broadcast(o), dimensions={{}}
  positions = s32[8] add(i, b)
  ROOT y = s32[8] add(x, positions)
}}
""",
)

ONE_HOT = (
    """HloModule base
ENTRY main {
  ids = s32[4] parameter(0)
  b = s32[4,8] broadcast(ids), dimensions={0}
  i = s32[4,8] iota(), iota_dimension=1
  hot = pred[4,8] compare(b, i), direction=EQ
  ROOT f = f32[4,8] convert(hot), sharding={devices=[1,2]<=[2]}
}
""",
    f"""HloModule dist, num_partitions=2
ENTRY main {{
  ids = s32[4] parameter(0)
{OFFSET}
  ob = s32[4] broadcast(o), dimensions={{}}
  local = s32[4] subtract(ids, ob)
  b = s32[4,4] broadcast(local), dimensions={{0}}
  i = s32[4,4] iota(), iota_dimension=1
  hot = pred[4,4] compare(b, i), direction=EQ
  ROOT f = f32[4,4] convert(hot)
}}
""",
)


@pytest.mark.parametrize(
    "programs, step, verdict",
    [
        (COUNT, 8, "equivalent"),
        (COUNT, 4, "not_equivalent"),
        (ONE_HOT, 4, "equivalent"),
        (ONE_HOT, 2, "not_equivalent"),
    ],
    ids=["count", "count_wrong_stride", "one_hot", "one_hot_wrong_stride"],
)
def test_a_device_block_from_the_device_id(tmp_path, programs, step, verdict):
    baseline, distributed = programs
    (tmp_path / "b.hlo").write_text(baseline)
    (tmp_path / "d.hlo").write_text(distributed.replace("STEP", str(step)))
    report = verify_files(str(tmp_path / "b.hlo"), str(tmp_path / "d.hlo"), RULES, mesh="tp=2")
    assert report.verdict == verdict, [s.reason for s in report.suspects[:2]]
