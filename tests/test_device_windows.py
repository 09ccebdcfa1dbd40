"""A slice whose offsets do not fall on the blocks' edges, as XLA's partitioner reshards it:
each device cuts windows of its own block, hands one to a neighbour with a
collective-permute, and picks per device with a select on its id. The device's result is
proved its block of the baseline's slice (scalify/forms/device_windows.py); a wrong pick, a wrong
permute, a wrong window and a window taken across another mesh axis are not."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import verify_texts

BASELINE = """\
HloModule base
ENTRY main {
  x = f32[16,12] parameter(0)
  ROOT y = f32[16,4] slice(x), slice={[0:16], [2:6]}
}
"""

# y's columns 2:6 of x: on a tp=2 mesh device 0 holds x's columns 0:6, device 1 columns
# 6:12; y's block on device 0 (x's 2:4) is its own, on device 1 (x's 4:6) device 0's
DISTRIBUTED = """\
HloModule dist, num_partitions={devices}
ENTRY main {{
  x = f32[{rows},6] parameter(0)
  own = f32[{rows},2] slice(x), slice={{[0:{rows}], [2:4]}}
  next = f32[{rows},2] slice(x), slice={{[0:{rows}], [4:6]}}
  moved = f32[{rows},2] collective-permute(next), source_target_pairs={pairs}
  pid = u32[] partition-id()
  two = u32[] constant(2)
  one = u32[] constant(1)
  tp = u32[] {coordinate}
  zero = u32[] constant(0)
  first = pred[] compare(tp, zero), direction={direction}
  pick = pred[{rows},2] broadcast(first), dimensions={{}}
  ROOT y = f32[{rows},2] select(pick, own, moved)
}}
"""

ONE_AXIS = dict(devices=2, rows=16, pairs="{{0,1}}", coordinate="remainder(pid, two)")
# dp=2 x tp=2, x split over dp by rows as well: device 2 dp + tp
TWO_AXES = dict(devices=4, rows=8, pairs="{{0,1},{2,3}}", coordinate="remainder(pid, two)")


def _verify(tmp_path: Path, mesh: str, template: str = DISTRIBUTED, **fields) -> str:
    fields = {**ONE_AXIS, "direction": "EQ", **fields}
    layout = "shard(0, dp) shard(1, tp)" if "dp" in mesh else "shard(1, tp)"
    relations = {"inputs": {"x": layout}, "outputs": [layout]}
    report = verify_texts(tmp_path, BASELINE, template.format(**fields), relations, mesh)
    return report.verdict


def test_a_window_handed_to_a_neighbour_is_the_devices_block(tmp_path):
    assert _verify(tmp_path, "tp=2") == "equivalent"


def test_the_same_within_each_group_of_a_two_axis_mesh(tmp_path):
    assert _verify(tmp_path, "dp=2,tp=2", **TWO_AXES) == "equivalent"


@pytest.mark.parametrize(
    "wrong",
    [
        {"direction": "NE"},  # each device picks the other's window
        {"pairs": "{{1,0}}"},  # the window sent the wrong way
    ],
    ids=["wrong_pick", "wrong_permute"],
)
def test_a_wrong_pick_or_permute_is_not_proved(tmp_path, wrong):
    assert _verify(tmp_path, "tp=2", **wrong) != "equivalent"


def test_a_window_from_another_row_block_is_not_proved(tmp_path):
    """The permute crosses dp: device 1 gets device 2's window, whose rows are the other dp
    block's."""
    crossed = {**TWO_AXES, "pairs": "{{2,1},{0,3}}"}
    assert _verify(tmp_path, "dp=2,tp=2", **crossed) != "equivalent"


def test_a_window_at_the_wrong_offset_is_not_proved(tmp_path):
    wrong = DISTRIBUTED.replace("[4:6]}}", "[3:5]}}")
    assert wrong != DISTRIBUTED
    assert _verify(tmp_path, "tp=2", wrong) != "equivalent"


def test_a_module_that_names_no_device_count_is_not_evaluated_per_device(tmp_path):
    """The pass reads a permute's pairs and the partition id as the mesh's only where the
    module says it runs on that many devices."""
    unnamed = DISTRIBUTED.replace("HloModule dist, num_partitions={devices}", "HloModule dist")
    assert unnamed != DISTRIBUTED
    assert _verify(tmp_path, "tp=2", unnamed) != "equivalent"


# The same block reached as XLA reaches Phi-3's quarter of q at tp 4: a whole block handed on
# (no dim of its own until the dynamic slice after it reads one), or a window padded back to
# a block's width, picked per device, then cut at an offset from a table over the device id
PICKED = """\
HloModule dist, num_partitions=2
ENTRY main {{
  x = f32[16,6] parameter(0)
  {moved}
  pid = u32[] partition-id()
  zero = u32[] constant(0)
  first = pred[] compare(pid, zero), direction=EQ
  pick = pred[16,6] broadcast(first), dimensions={{}}
  picked = f32[16,6] select(pick, x, moved)
  offsets = s32[2] constant({offsets})
  at = s32[1] dynamic-slice(offsets, pid), dynamic_slice_sizes={{1}}
  start = s32[] reshape(at)
  row = s32[] constant(0)
  ROOT y = f32[16,2] dynamic-slice(picked, row, start), dynamic_slice_sizes={{16,2}}
}}
"""
WHOLE = "moved = f32[16,6] collective-permute(x), source_target_pairs={{0,1}}"
PADDED = (
    "next = f32[16,2] slice(x), slice={{[0:16], [4:6]}}\n"
    "  sent = f32[16,2] collective-permute(next), source_target_pairs={{0,1}}\n"
    "  nothing = f32[] constant(0)\n"
    "  moved = f32[16,6] pad(sent, nothing), padding=0_0xWIDTHS"
)


@pytest.mark.parametrize(
    "moved, offsets, proved",
    [
        (WHOLE, "{2, 4}", True),
        (PADDED.replace("WIDTHS", "4_0"), "{2, 4}", True),
        (WHOLE, "{2, 2}", False),  # device 1 cuts device 0's block at its own window
        (PADDED.replace("WIDTHS", "2_2"), "{2, 4}", False),  # device 1's window is padding
    ],
    ids=["whole_block", "padded_window", "whole_block_wrong_offset", "padding_read"],
)
def test_a_block_handed_on_whole_or_padded_then_cut_per_device(tmp_path, moved, offsets, proved):
    template = PICKED.format(moved=moved, offsets=offsets).replace("{", "{{").replace("}", "}}")
    verdict = _verify(tmp_path, "tp=2", template)
    assert (verdict == "equivalent") == proved, verdict
