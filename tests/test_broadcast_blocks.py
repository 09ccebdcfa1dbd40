"""A broadcast to a device's rows of a new dim (a mask the same for every row of a batch
split over dp) is the device's block of the baseline's broadcast to all the rows
(scalify/broadcast_blocks.py); a broadcast to rows the split does not give is not."""

from __future__ import annotations

import pytest
from conftest import verify_texts

BASELINE = """\
HloModule base
ENTRY main {{
  x = f32[4] parameter(0)
  ROOT y = f32[{rows},4] broadcast(x), dimensions={{1}}
}}
"""

DISTRIBUTED = """\
HloModule dist, num_partitions=2
ENTRY main {{
  x = f32[4] parameter(0)
  n = f32[4] {op}(x)
  ROOT y = f32[{rows},4] broadcast(n), dimensions={{1}}
}}
"""


@pytest.mark.parametrize(
    "base_rows, dist_rows, op, layout, proved",
    [
        (2, 1, "copy", "shard(0, dp)", True),
        (2, 1, "negate", "shard(0, dp)", False),  # the rows of another value
        (3, 1, "copy", "shard(0, dp)", False),  # three rows are no two blocks of one
        (2, 1, "copy", "replicate", False),  # one row is not both
    ],
    ids=["one_row_each", "another_value", "uneven_rows", "not_replicated"],
)
def test_a_broadcast_to_a_devices_rows_is_its_block(
    tmp_path, base_rows, dist_rows, op, layout, proved
):
    report = verify_texts(
        tmp_path,
        BASELINE.format(rows=base_rows),
        DISTRIBUTED.format(rows=dist_rows, op=op),
        {"inputs": {"x": "replicate"}, "outputs": [layout]},
        "dp=2",
    )
    assert (report.verdict == "equivalent") == proved, report.verdict
