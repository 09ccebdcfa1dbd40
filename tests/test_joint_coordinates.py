"""A device's offset into a table split over two mesh axes that another axis separates in the
device order (XLA's vocab-parallel lookup on a (fsdp, tp, sp) mesh: the vocab over fsdp and
sp): the offset is a table over the device id, `c * (2 c_fsdp + c_sp)`, read as the device's
coordinate on the two axes together. Counted in the other order, or varying along tp, it is
no block offset. XLA may also compute the local index on the tp block of the ids and gather
it after; that is moved below the gather only where the offset is the same on every device
of the gather's group."""

from __future__ import annotations

from pathlib import Path

import pytest

from scalify.canon.gather_sinking import sink_gathers
from scalify.externs.device_tables import joint_coordinate_fit
from scalify.ir import Graph, Node
from scalify.report.text import render_text
from scalify.verify import verify_files

RULES = Path(__file__).resolve().parents[1] / "rules"
MESH = "fsdp=2,tp=2,sp=2"
RIGHT = "0, 4, 0, 4, 8, 12, 8, 12"  # 4 * (2 c_fsdp + c_sp), device id 4 c_fsdp + 2 c_tp + c_sp
SP_MAJOR = "0, 8, 0, 8, 4, 12, 4, 12"  # 4 * (2 c_sp + c_fsdp): another device's block
ALONG_TP = "0, 4, 8, 12, 0, 4, 8, 12"  # 4 * (2 c_tp + c_sp): not the table's split

GATHER_DIMS = (
    "offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, "
    "slice_sizes={1,3}"
)

BASELINE = """HloModule base
ENTRY main {
  table = f32[16,3] parameter(0), sharding={replicated}
  ids = s32[4] parameter(1), sharding={replicated}
  ROOT out = f32[4,3] gather(table, ids), GATHER_DIMS
}
"""

# the masked lookup into the device's 4 rows, its local index `local`, summed over GROUPS
MASKED_LOOKUP = """  zero = s32[] constant(0)
  zeros = s32[4] broadcast(zero), dimensions={}
  low = pred[4] compare(local, zeros), direction=GE
  four = s32[] constant(4)
  fours = s32[4] broadcast(four), dimensions={}
  high = pred[4] compare(local, fours), direction=LT
  inside = pred[4] and(low, high)
  three = s32[] constant(3)
  threes = s32[4] broadcast(three), dimensions={}
  safe = s32[4] clamp(zeros, local, threes)
  rows = f32[4,3] gather(table, safe), GATHER_DIMS
  mask = pred[4,3] broadcast(inside), dimensions={0}
  fzero = f32[] constant(0)
  fzeros = f32[4,3] broadcast(fzero), dimensions={}
  mine = f32[4,3] select(mask, rows, fzeros)
  ROOT out = f32[4,3] all-reduce(mine), replica_groups=GROUPS, to_apply=add
}

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
"""

# each device holds rows [4 r, 4 r + 4) of the table, r its coordinate on (fsdp, sp)
LOOKUP = """HloModule dist, num_partitions=8
ENTRY main {
  table = f32[4,3] parameter(0), sharding={devices=[4,1,2]<=[2,2,2]T(0,2,1) last_tile_dim_replicate}
  ids = s32[4] parameter(1), sharding={replicated}
  offsets = s32[8] constant({OFFSETS})
  pid = u32[] partition-id()
  picked = s32[1] dynamic-slice(offsets, pid), dynamic_slice_sizes={1}
  start = s32[] reshape(picked)
  starts = s32[4] broadcast(start), dimensions={}
INDEX
"""


WHOLE_IDS = "  local = s32[4] subtract(ids, starts)"
# the local index computed on the device's tp block of the ids, gathered over tp after
TP_BLOCK = """  two = u32[] constant(2)
  tdiv = u32[] divide(pid, two)
  tcoord = u32[] remainder(tdiv, two)
  tc = s32[] convert(tcoord)
  stwo = s32[] constant(2)
  hs = s32[] multiply(tc, stwo)
  half = s32[2] dynamic-slice(ids, hs), dynamic_slice_sizes={2}
  halfstarts = s32[2] broadcast(start), dimensions={}
  halflocal = s32[2] subtract(half, halfstarts)
  local = s32[4] all-gather(halflocal), replica_groups={{0,2},{1,3},{4,6},{5,7}}, dimensions={0}"""


def _verify(tmp_path, offsets: str, index: str):
    base, dist = tmp_path / "base.hlo", tmp_path / "dist.hlo"
    base.write_text(BASELINE.replace("GATHER_DIMS", GATHER_DIMS))
    lookup = LOOKUP.replace("OFFSETS", offsets).replace("INDEX", index) + MASKED_LOOKUP
    lookup = lookup.replace("GROUPS", "{{0,1,4,5},{2,3,6,7}}")
    dist.write_text(lookup.replace("GATHER_DIMS", GATHER_DIMS))
    return verify_files(str(base), str(dist), RULES, mesh=MESH)


def test_the_offset_table_is_read_as_a_coordinate_on_both_axes():
    assert joint_coordinate_fit([int(v) for v in RIGHT.split(",")], 8) == (0, 4, [(4, 2), (1, 2)])
    # sp the more significant: a count over the two axes in the other order (sp's stride 1
    # first); the lookup that reads it as fsdp's blocks is caught below
    assert joint_coordinate_fit([int(v) for v in SP_MAJOR.split(",")], 8) == (
        0,
        4,
        [(1, 2), (4, 2)],
    )
    # one axis (or a run of adjacent ones) is a plain coordinate, not a joint one
    assert joint_coordinate_fit(list(range(8)), 8) is None


@pytest.mark.parametrize("index", [WHOLE_IDS, TP_BLOCK], ids=["whole ids", "tp block"])
def test_a_lookup_into_a_block_over_two_separated_axes_is_proved(tmp_path, index):
    report = _verify(tmp_path, RIGHT, index)
    assert report.verdict == "equivalent", render_text(report)


@pytest.mark.parametrize("offsets", [SP_MAJOR, ALONG_TP], ids=["sp major", "along tp"])
@pytest.mark.parametrize("index", [WHOLE_IDS, TP_BLOCK], ids=["whole ids", "tp block"])
def test_offsets_of_another_split_are_caught(tmp_path, offsets, index):
    report = _verify(tmp_path, offsets, index)
    assert report.verdict == "not_equivalent", render_text(report)


# ---- what is not a device's offset, and what may not move below a gather

ONE_AXIS = """HloModule dist, num_partitions=4
ENTRY main {
  table = f32[4,3] parameter(0), sharding={devices=[4,1]<=[4]}
  ids = s32[4] parameter(1), sharding={replicated}
  offsets = s32[4] constant({0, 4, 8, 12})
  pid = u32[] partition-id()
INDEX
  picked = s32[1] dynamic-slice(offsets, idx), dynamic_slice_sizes={1}
  start = s32[] reshape(picked)
  starts = s32[4] broadcast(start), dimensions={}
  local = s32[4] subtract(ids, starts)
"""


@pytest.mark.parametrize(
    "index",
    [
        # a replica id is 0 on every partition, not the partition's id
        "  rid = u32[] replica-id()\n  zr = u32[] constant(0)\n  p0 = u32[] multiply(pid, zr)\n"
        "  idx = u32[] add(rid, p0)",
        # pid * 2^31 wraps around in u32: (pid * 2^31) / 2^31 is pid % 2, not pid
        "  big = u32[] constant(2147483648)\n  m = u32[] multiply(pid, big)\n"
        "  idx = u32[] divide(m, big)",
    ],
    ids=["replica id", "u32 wrap"],
)
def test_an_index_that_is_not_the_device_id_is_not_read_as_one(tmp_path, index):
    base, dist = tmp_path / "base.hlo", tmp_path / "dist.hlo"
    base.write_text(BASELINE.replace("GATHER_DIMS", GATHER_DIMS))
    lookup = ONE_AXIS.replace("INDEX", index) + MASKED_LOOKUP.replace("GROUPS", "{{0,1,2,3}}")
    dist.write_text(lookup.replace("GATHER_DIMS", GATHER_DIMS))
    report = verify_files(str(base), str(dist), RULES, mesh="tp=4")
    assert report.verdict != "equivalent", render_text(report)


def _offset_gathered(groups, partitions):
    """`all_gather(x - pid // 3)`: the offset differs between devices 2 and 3."""
    n = {}

    def add(i, op, operands, shape, dtype, attrs=None):
        n[i] = Node(i, op, operands, shape, dtype, attrs or {})

    add(0, "parameter", (), (2,), "s32", {"index": 0})
    add(1, "rank_index", (), (), "u32", {"kind": "partition"})
    add(2, "constant", (), (), "u32", {"value": "3"})
    add(3, "div", (1, 2), (), "u32")
    add(4, "convert", (3,), (), "s32", {"dtype": "s32"})
    add(5, "broadcast", (4,), (2,), "s32", {"dims": ()})
    add(6, "sub", (0, 5), (2,), "s32")
    add(7, "all_gather", (6,), (4,), "s32", {"groups": groups, "dim": 0})
    return Graph("t", n, [0], [7], num_partitions=partitions)


@pytest.mark.parametrize(
    "groups, partitions",
    [(((0, 1),), 4), ((), None), (((0, 1), (2, 3)), None)],
    ids=["one group listed", "no device count", "no device count, groups listed"],
)
def test_an_offset_not_known_equal_within_every_group_stays_above_the_gather(groups, partitions):
    graph = _offset_gathered(groups, partitions)
    sink_gathers(graph)
    assert graph.node(graph.outputs[0]).op == "all_gather"
    assert graph.node(graph.node(graph.outputs[0]).operands[0]).op == "sub"


def test_an_offset_equal_within_each_group_moves_below_it():
    graph = _offset_gathered(((0, 1), (2, 3)), 4)  # pid // 3: 0, 0 | 0, 1 -> not equal
    sink_gathers(graph)
    assert graph.node(graph.outputs[0]).op == "all_gather"
    graph = _offset_gathered(((0, 1), (2, 3)), 4)
    graph.nodes[2].attrs["value"] = "2"  # pid // 2: 0, 0 | 1, 1 -> equal within each group
    sink_gathers(graph)
    assert graph.node(graph.outputs[0]).op == "sub"
