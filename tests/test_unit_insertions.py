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
    report = _verify(
        tmp_path, BASELINE, DISTRIBUTED.replace("SHAPE", shape), "sp=2", "shard(2, sp)"
    )
    assert report.verdict == verdict, [s.reason for s in report.suspects[:2]]


def _verify(tmp_path, baseline: str, distributed: str, mesh: str, output: str):
    (tmp_path / "b.hlo").write_text(baseline)
    (tmp_path / "d.hlo").write_text(distributed)
    relations = tmp_path / "r.json"
    relations.write_text(f'{{"outputs": ["{output}"]}}')
    return verify_files(
        str(tmp_path / "b.hlo"), str(tmp_path / "d.hlo"), RULES, mesh=mesh,
        relations=str(relations),
    )  # fmt: skip


@pytest.mark.parametrize(
    "shape, verdict",
    [("1,1,8", "equivalent"), ("1,8,1", "not_equivalent")],
    ids=["same_place", "another_place"],
)
def test_a_unit_dim_inserted_beside_a_row_split_down_to_one(tmp_path, shape, verdict):
    """The batch split over dp down to one row per device: `[1, 8] -> [1, 1, 8]` may insert
    before or after the device's unit dim; both readings enter, and the one that matches the
    baseline's `[2, 16] -> [2, 1, 16]` holds."""
    baseline = BASELINE.replace("devices=[1,2]<=[2]", "devices=[2,2]<=[4]").replace(
        "devices=[1,1,2]<=[2]", "devices=[2,1,2]<=[4]"
    )
    distributed = DISTRIBUTED.replace("s32[2,8]", "s32[1,8]").replace("[1,2]<=[2]", "[2,2]<=[4]")
    distributed = distributed.replace("SHAPE", shape)
    report = _verify(tmp_path, baseline, distributed, "dp=2,sp=2", "shard(0, dp) shard(2, sp)")
    assert report.verdict == verdict, [s.reason for s in report.suspects[:2]]
