"""Two shards of the same dim do not commute: over ("dp", "tp") device (i, j) holds block
i*2+j, over ("tp", "dp") block j*2+i. A program whose blocks come out in the other order
must not be proved (it once was: layouts were compared sorted)."""

from __future__ import annotations

import pytest
from conftest import REPO, export_example, verify_json

from scalify.layout import Placement, canonical

pytest.importorskip("jax")


def test_same_dim_shards_keep_their_order_and_others_commute():
    dp0, tp0 = Placement("shard", "dp", dim=0), Placement("shard", "tp", dim=0)
    tp1, psum = Placement("shard", "tp", dim=1), Placement("partial", "tp", op="sum")
    assert canonical((tp0, dp0)) != canonical((dp0, tp0))
    assert canonical((tp1, dp0)) == canonical((dp0, tp1))
    assert canonical((psum, dp0)) == canonical((dp0, psum))


def test_blocks_in_the_wrong_order_are_not_proved(tmp_path):
    out = export_example(REPO / "examples" / "block_order" / "export.py", tmp_path)
    code, good = verify_json(out / "baseline.hlo", out / "tp.hlo")
    assert (code, good["verdict"]) == (0, "equivalent")
    code, bad = verify_json(out / "baseline.hlo", out / "tp_blocks_in_wrong_order.hlo")
    assert code == 1 and bad["verdict"] != "equivalent"
    assert bad["outputs"][0]["proven"] == "shard(1, tp) shard(1, dp)"


def test_contracted_dims_split_in_different_orders_are_caught(tmp_path):
    """Row-parallel over ("dp", "tp"): the weight's rows split over ("tp", "dp") pair the
    wrong blocks; the dot is the suspect and the reason names both orders."""
    out = export_example(REPO / "examples" / "block_order" / "export.py", tmp_path)
    code, good = verify_json(out / "row_baseline.hlo", out / "row.hlo")
    assert (code, good["verdict"]) == (0, "equivalent")
    code, bad = verify_json(out / "row_baseline.hlo", out / "row_contraction_mismatched.hlo")
    assert (code, bad["verdict"]) == (1, "not_equivalent")
    first = bad["suspects"][0]
    assert first["op"] == "dot"
    assert "over dp, tp in the lhs but over tp, dp in the rhs" in first["reason"]
