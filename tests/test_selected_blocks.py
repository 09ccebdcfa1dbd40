"""A constant index into a dim split one entry a device, as XLA's partitioner writes it:
each device zeroes its block unless it is device k of its group (perhaps after a
collective-permute hands it another device's block), and an all-reduce over the group
sums the one block left (scalify/forms/selected_blocks.py). Proved to be the baseline's slice;
a wrong device, a block from another group, a nonzero fill, every device keeping its block
and a sum over more than the group are not."""

from __future__ import annotations

import pytest
from conftest import verify_texts

BASELINE = """\
HloModule base
ENTRY main {{
  x = f32[{rows},2] parameter(0)
  ROOT y = f32[{rows},1] slice(x), slice={{[0:{rows}], [{k}:{k1}]}}
}}
"""

# dp=2 x tp=2: x split over tp along its columns, one column a device; the kept device is
# the one whose tp coordinate (device id % 2) the table `coords` gives as `kept`
DISTRIBUTED = """\
HloModule dist, num_partitions=4
ENTRY main {{
  pid = u32[] partition-id()
  x = f32[8,1] parameter(0)
  {held}
  coords = u32[4] constant({{0, 1, 0, 1}})
  at = u32[1] dynamic-slice(coords, pid), dynamic_slice_sizes={{1}}
  coord = u32[] reshape(at)
  kept = u32[] constant({kept})
  mine = pred[] compare(coord, kept), direction={direction}
  pick = pred[8,1] broadcast(mine), dimensions={{}}
  fill = f32[] constant({fill})
  zeros = f32[8,1] broadcast(fill), dimensions={{}}
  picked = f32[8,1] select(pick, held, zeros)
  ROOT y = f32[8,1] all-reduce(picked), replica_groups={groups}, to_apply=add
}}

add {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}}
"""

OWN = "held = f32[8,1] copy(x)"
HANDED = "held = f32[8,1] collective-permute(x), source_target_pairs={pairs}"
RIGHT = dict(held=OWN, kept=0, fill=0, direction="EQ", groups="{{0,1},{2,3}}", k=0, rows=8)
# x's rows split over dp as well: each dp row of devices keeps its own rows' column
BY_ROWS = dict(rows=16, layouts=("shard(0, dp) shard(1, tp)", "shard(0, dp)"))


def _verdict(tmp_path, layouts=("shard(1, tp)", "replicate"), **changes) -> str:
    fields = {**RIGHT, **changes}
    fields["k1"] = fields["k"] + 1
    # the module is formatted in two steps: `held` holds braces of its own
    text = DISTRIBUTED.replace("{held}", fields.pop("held").replace("{", "{{").replace("}", "}}"))
    relations = {"inputs": {"x": layouts[0]}, "outputs": [layouts[1]]}
    report = verify_texts(
        tmp_path, BASELINE.format(**fields), text.format(**fields), relations, "dp=2,tp=2"
    )
    return report.verdict


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"kept": 1, "k": 1},
        # device 0 of each group keeps device 1's column, handed to it
        {"held": HANDED.format(pairs="{{1,0},{3,2}}"), "k": 1},
        BY_ROWS,
    ],
    ids=["own_block", "other_block", "handed_block", "own_rows"],
)
def test_one_devices_block_summed_over_its_group_is_the_slice(tmp_path, changes):
    assert _verdict(tmp_path, **changes) == "equivalent"


@pytest.mark.parametrize(
    "changes",
    [
        {"k": 1},  # the baseline takes the other column
        # each dp row of devices keeps the other row's block: every group has its keeper,
        # but from another group
        {"held": HANDED.format(pairs="{{2,0},{3,1},{0,2},{1,3}}"), **BY_ROWS},
        {"fill": 1},  # the other devices add ones, not zeros
        {"direction": "GE"},  # every device keeps its block
        {"groups": "{{0,1,2,3}}"},  # summed over both dp rows
    ],
    ids=["other_column", "block_from_another_group", "nonzero_fill", "every_device", "over_dp"],
)
def test_a_near_miss_is_not_proved(tmp_path, changes):
    assert _verdict(tmp_path, **changes) != "equivalent"
