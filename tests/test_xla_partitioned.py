"""XLA's SPMD partitioner's own vocab-parallel lookup (a per-device offset read from a
constant table indexed by partition-id, a clamp, two compares and a select) is proved; an
offset table that is not the device's block start is not."""

from __future__ import annotations

import json
import re

import pytest
from conftest import REPO, assert_proved, exported_programs, run_cli, verify_json

pytest.importorskip("jax")


programs = exported_programs("xla_partitioned")


def test_xla_partitioned_vocab_parallel_lookup_is_proved(programs):
    report = assert_proved(programs / "baseline.hlo", programs / "partitioned.hlo")
    assert any("assumed: input `ids`" in note for note in report["notes"])


@pytest.mark.parametrize("table", ["{0, 64, 128, 128}", "{0, 32, 64, 96}", "{64, 128, 192, 256}"])
def test_an_offset_table_off_the_blocks_is_not_proved(programs, table, tmp_path):
    text = (programs / "partitioned.hlo").read_text()
    (original,) = set(re.findall(r"constant\((\{0, 64, 128, 192\})\)", text))
    broken = tmp_path / "broken.hlo"
    broken.write_text(text.replace(original, table))
    code, report = verify_json(programs / "baseline.hlo", broken)
    assert code == 1 and report["verdict"] != "equivalent"


def test_an_output_whose_layout_nothing_states_is_asked_for(programs, tmp_path):
    result = run_cli("verify", str(programs / "rows_baseline.hlo"), str(programs / "rows.hlo"))
    assert result.code == 2
    assert "output 0 has local shape [2, 32] where the baseline's is [8, 32]" in result.err
    relations = tmp_path / "relations.json"
    relations.write_text('{"outputs": ["shard(0, tp)"]}')
    stated = run_cli(
        "verify",
        str(programs / "rows_baseline.hlo"),
        str(programs / "rows.hlo"),
        "--relations",
        str(relations),
    )
    assert stated.code == 0, stated.out


TABLES = REPO / "tests" / "device_tables"


@pytest.mark.parametrize(
    "program, verdict", [("fsdp_block.hlo", "equivalent"), ("tensor_block.hlo", "not_equivalent")]
)
def test_offsets_through_a_coordinate_table(program, verdict):
    """XLA on a mesh of two axes: the device id to its fsdp coordinate through one table,
    the coordinate to an offset through another; the same program reading the tensor
    coordinate (`{0, 1, 0, 1}`) cuts the wrong block."""
    result = run_cli(
        "verify",
        str(TABLES / "baseline.hlo"),
        str(TABLES / program),
        "--relations",
        str(TABLES / "relations.json"),
        "--format",
        "json",
    )
    assert json.loads(result.out)["verdict"] == verdict


def test_a_broadcast_into_a_dim_of_one_entry_per_device_is_proved(programs):
    """RoPE's cos broadcast over the heads, one head per device: locally the broadcast only
    adds a unit dim (a view), globally it spreads over the heads; both forms are kept."""
    code, report = verify_json(programs / "rope_baseline.hlo", programs / "rope.hlo")
    assert (code, report["verdict"]) == (0, "equivalent"), report["suspects"][:1]
