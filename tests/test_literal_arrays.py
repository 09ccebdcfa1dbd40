"""An integer value computed from literals alone is written as the count or fill it is
(`scalify/canon/literal_arrays.py`); a value that is neither keeps its ops."""

from __future__ import annotations

from pathlib import Path

from scalify.canon.canonicalize import canonicalize
from scalify.frontends import parse_graph_text

REPO_RULES = Path(__file__).resolve().parents[1] / "rules"


def canonical(body: str):
    text = "HloModule m\nENTRY main {\n" + body + "\n}\n"
    return canonicalize(parse_graph_text(text, "m.hlo"))


def _read_by_a_table(count: str) -> str:
    """`count` (an s32[2,8] value named `pos`) looks up rows of a parameter table."""
    gather = (
        "gather(t, pos), offset_dims={2}, collapsed_slice_dims={0}, start_index_map={0}, "
        "index_vector_dim=2, slice_sizes={1,4}"
    )
    return f"""  t = f32[16,4] parameter(0)
{count}
  ROOT r = f32[2,8,4] {gather}"""


def _positions(graph):
    (out,) = [graph.node(o) for o in graph.outputs]
    return out


def test_positions_made_by_arithmetic_on_literals_are_one_count():
    """ones, a running sum by hand (2 * iota + 1 - iota - 1 + 3 = iota + 3): the count 3..10
    for every row, whatever ops made it."""
    graph = canonical(
        _read_by_a_table(
            """  i = s32[2,8] iota(), iota_dimension=1
  two = s32[] constant(2)
  b2 = s32[2,8] broadcast(two), dimensions={}
  twice = s32[2,8] multiply(i, b2)
  three = s32[] constant(3)
  b3 = s32[2,8] broadcast(three), dimensions={}
  shifted = s32[2,8] add(twice, b3)
  pos = s32[2,8] subtract(shifted, i)"""
        )
    )
    ops = {n.op for n in graph.nodes.values()}
    assert "sub" not in ops and "mul" not in ops, sorted(ops)
    counts = [n for n in graph.nodes.values() if n.op == "iota"]
    assert [c.shape for c in counts] == [(8,)]  # one count, no batch size in it


def test_a_value_that_is_no_count_keeps_its_ops():
    """i * i along the row is not an arithmetic count: left as computed."""
    graph = canonical(
        _read_by_a_table(
            """  i = s32[2,8] iota(), iota_dimension=1
  pos = s32[2,8] multiply(i, i)"""
        )
    )
    assert any(n.op == "mul" for n in graph.nodes.values())


def _per_device(second_offset: int) -> str:
    """Each of 2 devices counts 8 positions from an offset it picks by a test on its id (as
    XLA writes a scan split across the sequence devices): 0 on device 0, `second_offset` on
    device 1. No affine reading of the id sees it; evaluated per device, it is one."""
    return f"""  pid = u32[] partition-id()
  one = u32[] constant(1)
  first = pred[] compare(pid, one), direction=LT
  zero = s32[] constant(0)
  other = s32[] constant({second_offset})
  offset = s32[] select(first, zero, other)
  offsets = s32[2,8] broadcast(offset), dimensions={{}}
  i = s32[2,8] iota(), iota_dimension=1
  pos = s32[2,8] add(i, offsets)"""


def _sharded(body: str):
    text = "HloModule m, num_partitions=2\nENTRY main {\n" + body + "\n}\n"
    return canonicalize(parse_graph_text(text, "m.hlo"))


def test_a_device_dependent_count_is_the_devices_block_of_the_whole():
    """Offsets 0 and 8: device r holds positions 8r .. 8r + 7, its block of iota(16)."""
    graph = _sharded(_read_by_a_table(_per_device(8)))
    (block,) = [n for n in graph.nodes.values() if n.op == "slice_at"]
    assert graph.node(block.operands[0]).shape == (16,)
    assert block.attrs == {"dim": 0, "size": 8, "parts": 2}


def test_a_device_dependent_value_that_is_no_block_stays_a_sum():
    """Offsets 0 and 7: the devices' counts overlap, no block of one count. The offset's
    test on the id is read as the arithmetic it is on every device, 7 * coordinate
    (device_tables.py's `fold_device_scalars`), and the count stays a sum."""
    graph = _sharded(_read_by_a_table(_per_device(7)))
    ops = {n.op for n in graph.nodes.values()}
    assert "slice_at" not in ops and "select" not in ops
    assert {"add", "mul", "rem"} <= ops


def test_the_device_block_is_proved_and_an_overlapping_one_is_not(tmp_path):
    import json

    from scalify.verify import verify_files

    whole = """  i = s32[2,16] iota(), iota_dimension=1
  pos = s32[2,16] add(i, i)
  half = s32[2,16] subtract(pos, i)"""
    baseline = (
        "HloModule b\nENTRY main {\n"
        + _read_by_a_table(whole)
        .replace("gather(t, pos)", "gather(t, half)")
        .replace("f32[2,8,4]", "f32[2,16,4]")
        + "\n}\n"
    )
    (tmp_path / "baseline.hlo").write_text(baseline)
    relations = tmp_path / "relations.json"
    relations.write_text(json.dumps({"mesh": "sp=2", "outputs": ["shard(1, sp)"]}))
    verdicts = []
    for offset in (8, 7):
        dist = tmp_path / f"dist{offset}.hlo"
        body = _read_by_a_table(_per_device(offset))
        dist.write_text("HloModule d, num_partitions=2\nENTRY main {\n" + body + "\n}\n")
        report = verify_files(
            str(tmp_path / "baseline.hlo"), str(dist), REPO_RULES, relations=str(relations)
        )
        verdicts.append(report.verdict)
    assert verdicts == ["equivalent", "not_equivalent"]
