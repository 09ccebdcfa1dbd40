"""A reshape that only inserts a unit dim into a sharded value (`mask.reshape(b, 1, s)` on a
sequence shard): read also as a broadcast, it carries the shard on to the dim's new place;
a unit dim inserted elsewhere than the baseline's is no such value."""

from __future__ import annotations

from pathlib import Path

import pytest

from scalify.verify import verify_files

RULES = Path(__file__).resolve().parents[1] / "rules"

BASELINE = """HloModule base
ENTRY main {
  ids = s32[2,16] parameter(0), sharding={devices=[1,2]<=[2]}
  r = s32[2,1,16] reshape(ids)
  ROOT c = pred[2,1,16] compare(r, r), direction=GE, sharding={devices=[1,1,2]<=[2]}
}
"""

DISTRIBUTED = """HloModule dist
ENTRY main {
  ids = s32[2,8] parameter(0), sharding={devices=[1,2]<=[2]}
  r = s32[SHAPE] reshape(ids)
  ROOT c = pred[SHAPE] compare(r, r), direction=GE
}
"""


@pytest.mark.parametrize(
    "shape, verdict",
    [("2,1,8", "equivalent"), ("2,8,1", "not_equivalent")],
    ids=["same_place", "another_place"],
)
def test_a_unit_dim_inserted_into_a_shard(tmp_path, shape, verdict):
    (tmp_path / "b.hlo").write_text(BASELINE)
    (tmp_path / "d.hlo").write_text(DISTRIBUTED.replace("SHAPE", shape))
    relations = tmp_path / "r.json"
    relations.write_text('{"outputs": ["shard(2, sp)"]}')
    report = verify_files(
        str(tmp_path / "b.hlo"), str(tmp_path / "d.hlo"), RULES, mesh="sp=2",
        relations=str(relations),
    )  # fmt: skip
    assert report.verdict == verdict, [s.reason for s in report.suspects[:2]]
